"""The only stand-ins this suite puts under a trainer, each for a device assumption that blocks a CPU run of a code path
that does not depend on the device. Each says what it replaces and why the trained math is unaffected.
"""

from __future__ import annotations

import contextlib


@contextlib.contextmanager
def speculators_trainer_on_cpu():
    """speculators' ``Trainer`` (0.9.0: ``speculators/train/trainer.py``) moves the model and every batch to
    ``get_local_rank()`` (0 without torchrun, i.e. ``cuda:0``). Here that rank reads ``"cpu"``: the same
    ``.to(...)`` calls place everything on the CPU. Its step timer calls ``torch.accelerator.synchronize()`` on
    logging steps, which raises where no accelerator exists; with none there is no queued device work to wait for,
    so it returns at once. Nothing else changes: its autocast asks for the accelerator's device type, falls back to
    "cuda" on a CPU-only torch and is disabled there (float32 compute, the dtype the hidden states are given in),
    and its data loader, optimizer, scheduler, loss and checkpointer are its own."""
    import torch
    from speculators.train import trainer

    rank, synchronize = trainer.get_local_rank, torch.accelerator.synchronize
    trainer.get_local_rank = lambda: "cpu"
    if torch.accelerator.current_accelerator() is None:
        torch.accelerator.synchronize = lambda device=None: None
    try:
        yield
    finally:
        trainer.get_local_rank, torch.accelerator.synchronize = rank, synchronize


@contextlib.contextmanager
def specforge_loss_on_cpu():
    """SpecForge 0.2.0's per-TTT-step loss, ``specforge.core.loss.LogSoftmaxLoss`` (called as
    ``LogSoftmaxLoss.apply(logits, target_p, position_mask)`` by ``_compute_loss_and_acceptance_rate`` in
    ``specforge/algorithms/eagle3/model.py``), is a Triton kernel pair and cannot run on CPU tensors. Here that name, in
    the module that calls it, is SpecForge's own torch reference of the same loss, ``specforge.core.loss._compute_loss``
    (``# Reference implementation`` in the same file; its ``benchmark_loss`` checks the kernel against it). The same
    math: the kernel's forward writes, per row of the flattened ``[B*T, V]`` logits, ``-sum_v target_p * log_softmax(
    logits)`` in float32 where ``position_mask`` is set and 0 where it is not, and returns the mean over all ``B*T``
    rows; the reference computes ``-sum(position_mask * target_p * log_softmax(logits.float()), -1).mean()`` over
    ``[B, T]``, the same number. The kernel's backward writes ``-(target_p - softmax(logits) * sum(target_p)) / (B*T)``
    on masked rows and 0 elsewhere, which is autograd's gradient of the reference. Nothing else changes: the acceptance
    rate, the accuracy metrics, the TTT unroll and the optimizer are SpecForge's."""
    from specforge.algorithms.eagle3 import model
    from specforge.core.loss import _compute_loss

    class TorchLogSoftmaxLoss:
        @staticmethod
        def apply(logits, target_p, position_mask):
            return _compute_loss(logits, target_p, position_mask)

    kernel = model.LogSoftmaxLoss
    model.LogSoftmaxLoss = TorchLogSoftmaxLoss
    try:
        yield
    finally:
        model.LogSoftmaxLoss = kernel
