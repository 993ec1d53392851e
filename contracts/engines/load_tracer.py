"""The load-tracing half of the adapter skeleton: watching an engine's own ``load_weights``, and asking it which
rename or setting would load what it dropped. An engine adapter supplies only how it builds its draft and how a
loader call is tied back to a checkpoint tensor.

Contract served: ``key-naming`` / ``tensor-shapes``. Neither SGLang's nor vLLM's EAGLE-3 ``load_weights`` reports
what it skipped (both return None; SGLang 0.5.3 dropped all ten ``layers.0.*`` tensors of a speculators draft and
seven parameters stayed random while the server started), so every parameter's weight loader is wrapped: each call
records the parameter, the shard, what the engine raised, and the region it wrote (a region whose size differs from
the tensor's is a silent pad or truncation by the engine).
"""

from __future__ import annotations

import contextlib
import threading
import weakref

from contracts.checkpoint import Checkpoint, InputError
from contracts.engines.tracing import CopyCounter, iter_for_device
from contracts.observations import LoadCall, RenameProbe, TensorFate
from contracts.renames import candidate_names, config_switches, explaining_switches


class WeightLoaderTracer:
    """Wraps every parameter's weight loader of one engine model. A subclass says which checkpoint tensor a loader
    call serves (``fate_of``) and how the tensors are fed (``feed``); the measurement of each call is the same for
    every engine: sentinel the whole parameter, call the engine's loader, count what it overwrote, put back what it
    did not touch. On the meta device (real-size drafts) there are no values: the elements of every destination the
    engine's loader copies into are counted instead."""

    def __init__(self, model, default_loader):
        self.model = model
        self.meta_written: dict[str, int] = {}  # meta device: elements the loader copied into each parameter
        self.params = dict(model.named_parameters())
        for name, param in self.params.items():
            param.weight_loader = self._wrap(name, getattr(param, "weight_loader", default_loader))

    def fate_of(self, loaded_weight) -> TensorFate | None:
        raise NotImplementedError

    def feed(self, items, fates: dict[str, TensorFate]):
        raise NotImplementedError

    def describe_error(self, message: str, fates: dict[str, TensorFate]) -> str:
        """What an error that escaped ``load_weights`` says, with the tensor it was loading when known."""
        return message

    def _wrap(self, name, original):
        def traced(param, loaded_weight, *args, **kwargs):
            import torch

            shard = args[0] if args else kwargs.get("shard_id", kwargs.get("loaded_shard_id"))
            if shard is None:
                shard = getattr(loaded_weight, "shard_id", None)
            call = LoadCall(param=name, shard=None if shard is None else str(shard))
            tracked = param.is_floating_point() and not param.is_meta
            if tracked:
                with torch.no_grad():
                    before = param.data.clone()
                    param.data.fill_(float("nan"))
            copied = CopyCounter() if param.is_meta else None
            try:
                with copied if copied is not None else contextlib.nullcontext():
                    original(param, loaded_weight, *args, **kwargs)
            except Exception as e:  # the engine's own shape/dtype assertion: record it, keep loading
                call.error = f"{type(e).__name__}: {e}".strip() or type(e).__name__
            if tracked:
                with torch.no_grad():
                    untouched = torch.isnan(param.data)
                    call.written = int((~untouched).sum())
                    param.data[untouched] = before[untouched]
            elif copied is not None:
                call.written = copied.elements
                if call.error is None:
                    self.meta_written[name] = self.meta_written.get(name, 0) + copied.elements
            else:  # an integer parameter (vLLM's draft->target map): written whole unless the loader raised
                call.written = int(param.numel()) if call.error is None else 0
            fate = self.fate_of(loaded_weight)
            if fate is not None:
                fate.calls.append(call)

        return traced

    def load(self, items, fates: dict[str, TensorFate]) -> str | None:
        """Feed the tensors to the engine's ``load_weights``; what escaped it, if anything."""
        try:
            self.model.load_weights(self.feed(items, fates))
        except InputError:  # the checkpoint itself is unreadable: not an engine observation
            raise
        except Exception as e:
            return self.describe_error(f"{type(e).__name__}: {e}", fates)
        return None


class ByObjectTracer(WeightLoaderTracer):
    """A loader call serves the tensor object it was given, or the tensor it is a view of (an engine that collects
    every tensor before loading: vLLM). A fed tensor's id leaves the map when the tensor dies, so an id reused by a
    tensor the engine made later is never taken for it, and nothing is kept alive longer than the engine keeps it."""

    def __init__(self, model, default_loader):
        self.by_id: dict[int, TensorFate] = {}
        super().__init__(model, default_loader)

    def fate_of(self, loaded_weight) -> TensorFate | None:
        fate = self.by_id.get(id(loaded_weight))
        base = getattr(loaded_weight, "_base", None)
        if fate is None and base is not None:  # a view the engine took of a tensor it was given
            fate = self.by_id.get(id(base))
        return fate

    def feed(self, items, fates):
        for key, tensor in items:
            self.by_id[id(tensor)] = fates[key]
            weakref.finalize(tensor, self.by_id.pop, id(tensor), None)
            yield key, tensor

    def load(self, items, fates):
        try:
            return super().load(items, fates)
        finally:
            self.by_id.clear()


class InOrderTracer(ByObjectTracer):
    """A loader call serves the tensor object it was given (or the one it is a view of), else, on the thread that
    feeds, the tensor last fed (an engine that loads each tensor as it is yielded and may hand its loader a tensor
    it derived: SGLang). Order alone is not enough: SGLang's DeepSeek/Kimi loaders submit the weight loaders to a
    thread pool, so a call may run after the next tensor was fed, or after the last (the Kimi-K2.5 target's
    embedding was attributed to no key, or to the head's key, from one run to the next). A tensor after which the
    model's ``side_channel`` attribute changed went there (SGLang's ``d2t`` -> ``hot_token_id``)."""

    side_channel = "hot_token_id"

    def __init__(self, model, default_loader):
        self.current: TensorFate | None = None
        self.feeding_thread: int | None = None
        super().__init__(model, default_loader)

    def fate_of(self, loaded_weight) -> TensorFate | None:
        fate = super().fate_of(loaded_weight)
        if fate is None and threading.get_ident() == self.feeding_thread:
            fate = self.current
        return fate

    def feed(self, items, fates):
        self.feeding_thread = threading.get_ident()
        for key, tensor in super().feed(items, fates):
            self.current = fates[key]
            before = getattr(self.model, self.side_channel, None)
            yield key, tensor
            if getattr(self.model, self.side_channel, None) is not before:
                self.current.side_channel = self.side_channel
        self.current = None

    def load(self, items, fates):
        try:
            return super().load(items, fates)
        finally:
            self.current = None

    def describe_error(self, message, fates):
        return message + (f" (while loading {self.current.key})" if self.current is not None else "")


def fates_of(ckpt: Checkpoint) -> dict[str, TensorFate]:
    """One empty ``TensorFate`` per checkpoint tensor, to be filled by a traced load."""
    return {name: TensorFate(key=name, shape=list(info.shape), dtype=info.dtype) for name, info in ckpt.tensors.items()}


def config_summary(hf_config, keys) -> dict:
    """The draft config the engine built from, as plain data (the keys the reports show)."""
    out = {}
    for key in keys:
        if hasattr(hf_config, key):
            value = getattr(hf_config, key)
            out[key] = value if isinstance(value, (int, float, str, bool, list, dict, type(None))) else str(value)
    return out


def probe_one(tracer, candidate: str, tensor) -> list[str]:
    """Feed one tensor under ``candidate`` into the engine's load_weights (TRACER wraps the model); the parameters
    it reached without error ([] when the engine raised: a rename that makes it raise is no fix)."""
    fate = TensorFate(key=candidate, shape=list(tensor.shape), dtype=str(tensor.dtype).removeprefix("torch."))
    error = tracer.load([(candidate, tensor)], {candidate: fate})
    return [] if error else fate.reached


def probe_fixes(build, trace, ckpt: Checkpoint, dropped: list[str], device: str, num_layers: int) -> list[RenameProbe]:
    """Ask the engine which renames or config switches would make it load each dropped tensor. ``build(overrides)``
    builds the engine's draft (raising when it cannot); ``trace(model)`` wraps it in the adapter's tracer."""
    probes = []
    present = set(ckpt.tensors)
    wanted = set(dropped)
    tensors = {key: t for key, t in iter_for_device(ckpt, device) if key in wanted}
    model = build(None)
    for key in dropped:
        for candidate in candidate_names(key):
            reached = probe_one(trace(model), candidate, tensors[key])
            if reached:
                probes.append(RenameProbe(key=key, candidate=candidate, config_change=None, reached=reached))
                if candidate not in present:
                    break
    for switch in config_switches(dropped, num_layers):
        try:
            switched = build(switch)
        except Exception:  # noqa: BLE001  (a switch the engine cannot build with is no fix)
            continue
        for key in dropped:
            reached = probe_one(trace(switched), key, tensors[key])
            if reached:
                probes.append(RenameProbe(key=key, candidate="", config_change=switch, reached=reached))
    return probes


def probe_settings(build, load_again, observation) -> dict | None:
    """Load the checkpoint again into the draft the engine builds under each setting that could explain the
    unwritten parameters (``explaining_switches``); the first under which every tensor reaches a parameter and every
    parameter is written or shared. ``load_again(model)`` -> (load error, dropped keys, parameters left unwritten)."""
    for switch in explaining_switches(observation):
        try:
            model = build(switch)
        except Exception:  # noqa: BLE001  (a setting the engine cannot build with is no fix)
            continue
        load_error, dropped, left = load_again(model)
        if load_error is None and not left and not dropped:
            return switch
    return None
