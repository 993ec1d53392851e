"""The synthetic language the converged fixtures are trained on: small enough that a tiny Llama learns it in a minute
on a CPU, rich enough that drafting it needs the target's hidden states.

120 three-token words over 60 ids spread across the 512-id vocabulary (so a draft vocabulary of 64 covers it and
``d2t`` holds large offsets: a zeroed or absolute ``d2t`` proposes ids the target never emits). A word is one of 20
start ids and two of 40 inner ids, so a token alone does not tell which word is being spoken: the next word depends on
the current one (four successors, weights 0.6 / 0.2 / 0.12 / 0.08) and only the target's context knows it. The most
likely successors form one cycle through all 120 words, so greedy continuations run 360 tokens before they repeat (a
loop a broken draft could learn to predict is not there). Every sequence starts with 0-16 random ids without loss (a
prompt of random ids, ``accept``'s default, is continued in the language).

Standard library only: every trainer's environment and vLLM's draw the same corpus.
"""

from __future__ import annotations

import random

SEED = 20261130
VOCAB = 512
WORDS = 120
WORD_TOKENS = 3
SUCCESSOR_WEIGHTS = (0.6, 0.2, 0.12, 0.08)
MAX_NOISE = 16


class Language:
    """The language's words, token ids and successor table, fixed by ``SEED``."""

    def __init__(self, seed: int = SEED):
        rng = random.Random(seed)
        self.ids = sorted(rng.sample(range(3, VOCAB), 60))  # 0..2 stay special (pad / bos / eos)
        starts, inner = self.ids[:20], self.ids[20:]
        rng.shuffle(starts)
        rng.shuffle(inner)
        words: list[list[int]] = []
        seen: set = set()
        while len(words) < WORDS:
            word = (rng.choice(starts), rng.choice(inner), rng.choice(inner))
            if word not in seen:
                seen.add(word)
                words.append(list(word))
        self.words = words
        order = list(range(WORDS))
        rng.shuffle(order)
        top = {order[i]: order[(i + 1) % WORDS] for i in range(WORDS)}
        self.successors = {w: [top[w], *rng.sample([x for x in range(WORDS) if x != top[w]], 3)]
                           for w in range(WORDS)}

    def sequence(self, length: int, rng: random.Random, noise: bool = True) -> tuple[list[int], list[int]]:
        """``length`` ids: a random-id prefix (loss mask 0) then words of the language (loss mask 1)."""
        k = rng.randint(0, MAX_NOISE) if noise else 0
        ids, mask = [rng.randrange(VOCAB) for _ in range(k)], [0] * k
        word = rng.randrange(WORDS)
        while len(ids) < length:
            ids += self.words[word]
            mask += [1] * WORD_TOKENS
            word = rng.choices(self.successors[word], SUCCESSOR_WEIGHTS)[0]
        return ids[:length], mask[:length]

    def corpus(self, n: int, length: int, seed: int) -> list[tuple[list[int], list[int]]]:
        rng = random.Random(seed)
        return [self.sequence(length, rng) for _ in range(n)]

    def frequencies(self, corpus) -> dict[int, int]:
        """Token counts over the language part of ``corpus`` (every vocab id, zeros included): what a trainer's
        vocab-mapping step is fed."""
        counts = dict.fromkeys(range(VOCAB), 0)
        for ids, mask in corpus:
            for t, m in zip(ids, mask):
                counts[t] += m
        return counts
