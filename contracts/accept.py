"""``eagle3-contracts accept``: acceptance measured on an engine's own speculative decoding loop on a CPU.

The contracts predict from the engine's code whether a draft is served as trained; the failure they exist for is a
number, an accept length near 1.00. ``accept`` serves the target with the draft through vLLM's own ``LLM``
(``contracts.engines.vllm.acceptance``, in that release's environment) and reports vLLM's own counters: the mean
acceptance length (1 + accepted tokens per draft round) and the acceptance rate at each draft position. On a CPU
vLLM serves with Model Runner V1 (V2, a GPU server's default, runs Triton kernels only), and the report says so.
SGLang's serving loop does not run on a CPU (its EAGLE worker's draft attention needs a GPU), so it is refused
with that reason.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

from contracts.checkpoint import Checkpoint


class AcceptUnavailable(Exception):
    """The engine's serving loop cannot run here (an invocation that cannot be served, exit 2)."""


class ServingRefused(Exception):
    """The engine refused to serve the draft (a finding: exit 1 with the engine's own error)."""


def measure(draft, target, *, engine: str = "vllm", tokens: int = 3, prompts: int = 4, max_tokens: int = 64,
            temperature: float = 0.0) -> dict:
    """vLLM's acceptance counters for DRAFT speculating for TARGET on its CPU serving loop, with the engine and path
    measured and the wall time. Raises contracts.checkpoint.InputError (unusable inputs), AcceptUnavailable,
    ServingRefused."""
    from contracts.engines import canonical, parse_spec, runner_of

    draft, target = Path(draft).resolve(), Path(target).resolve()  # the job runs in a directory of its own
    Checkpoint.open(draft)
    Checkpoint.open(target)  # with its weights: accept serves the target
    spec = canonical(engine)
    name, version = parse_spec(spec)
    if name != "vllm":
        raise AcceptUnavailable("accept: SGLang's serving loop does not run on a CPU (EAGLEWorkerV2's draft attention "
                                "needs a GPU or sgl-kernel's CPU build); measure on vLLM (--engine vllm==X)")
    if runner_of(spec) == "v2":
        raise AcceptUnavailable("accept: vLLM's Model Runner V2 (a GPU server's default) runs its batch preparation and "
                                "speculator kernels in Triton only, which a CPU lacks; accept measures Model Runner V1, "
                                "the CPU build's runner (--runner v1, the default here)")
    from contracts.engines.environments import environment_for
    from contracts.engines.remote import run_module

    python = environment_for(name, version)
    options = {"tokens": tokens, "n_prompts": prompts, "max_tokens": max_tokens, "temperature": temperature}
    start = time.perf_counter()
    done = run_module(python, "contracts.engines.vllm.acceptance", str(draft), str(target), json.dumps(options))
    wall = time.perf_counter() - start
    if done.returncode != 0:  # outside the engine's own calls: a defect of this suite, never a verdict
        raise RuntimeError(f"the acceptance job in vLLM {version}'s environment failed: {_last_error(done.stderr)}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    if "refused" in result:
        raise ServingRefused(f"vLLM {version} did not serve the draft: {result['refused']}")
    return {"engine": {"name": "vllm", "version": version}, "runner": "v1",
            "path": "vLLM Model Runner V1 (the CPU build's runner; a GPU server runs Model Runner V2 by default)",
            "draft": str(draft), "target": str(target), **result, "seconds_wall": round(wall, 1)}


def _last_error(stderr: str) -> str:
    """The last exception line a failed job wrote (else its last line), without torch's ``[rankN]:`` prefix."""
    lines = [re.sub(r"^\[rank\d+\]:\s*", "", line.strip()) for line in stderr.strip().splitlines() if line.strip()]
    errors = [line for line in lines if line.split(":")[0].endswith(("Error", "Exception"))]
    return (errors or lines or ["(no output)"])[-1][:400]


def render_text(result: dict) -> str:
    mode = "greedy" if result["temperature"] == 0 else f"temperature {result['temperature']:g}"
    length = result["mean_acceptance_length"]
    rates = " ".join(f"{r:.2f}" for r in result["acceptance_rate_per_position"])
    return (f"{result['draft']}: mean acceptance length {length:.2f} with {result['num_speculative_tokens']} "
            f"speculative tokens ({mode}; {result['prompts']} prompts x {result['max_tokens']} tokens, "
            f"{result['rounds']} draft rounds, {result['accepted_tokens']} of {result['draft_tokens']} draft tokens "
            f"accepted)\n"
            f"  acceptance rate per draft position: {rates or '-'}\n"
            f"  on {result['path']}, vLLM {result['engine']['version']}; {result['seconds_wall']:.0f} s wall "
            f"({result['seconds_build']:.0f} s engine start-up)\n") if length is not None else \
        (f"{result['draft']}: vLLM {result['engine']['version']} ran no draft round ({result['generated_tokens']} "
         f"tokens generated)\n")
