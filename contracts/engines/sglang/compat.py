"""SGLang's internal APIs as they differ between releases, detected from the installed engine (never
assumed from its version number), so one adapter drives 0.5.3 through 0.5.23 through their own code.

Each helper names the releases it was measured on. A difference it does not know raises the engine's own
error, which the adapter reports as an observation (never a silent fallback to another release's logic).
"""

from __future__ import annotations

import ast
import contextlib
import importlib
import inspect
import textwrap
import types


def accepts(function, keyword: str) -> bool:
    """Whether this release's ``function`` (or class constructor) takes ``keyword``."""
    return keyword in inspect.signature(function).parameters


def supported(function, **kwargs) -> dict:
    """The keyword arguments this release's ``function`` takes, of ``kwargs``: newer releases added flags
    (e.g. the KV pools' ``enable_alt_stream``, 0.5.23) whose off value is the older releases' behaviour."""
    params = inspect.signature(function).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return kwargs
    return {k: v for k, v in kwargs.items() if k in params}


def has_module(name: str) -> bool:
    try:
        importlib.import_module(name)
    except ModuleNotFoundError:
        return False
    return True


def attention_context(backend):
    """The context a model forward reads its attention backend from: SGLang 0.5.23's ``forward_context``;
    0.5.9 reads ``forward_batch.attn_backend`` only (which the caller sets on the batch either way)."""
    try:
        from sglang.srt.model_executor.forward_context import ForwardContext, forward_context
    except ModuleNotFoundError:
        return contextlib.nullcontext()
    return forward_context(ForwardContext(attn_backend=backend))


def _run_nodes(nodes, source_file: str, module, scope: dict) -> dict:
    code = compile(ast.Module(body=list(nodes), type_ignores=[]), source_file, "exec")
    env = dict(vars(module))
    env.update(scope)
    exec(code, env)  # noqa: S102  (the installed engine's own source, selected by the caller)
    return env


def run_model_runner_statement(select, scope: dict) -> dict:
    """Execute, on a stand-in ``self``, the one ``if`` statement of this release's ``ModelRunner`` that
    ``select(node)`` picks (an ``ast.If``), in the engine module's own globals; returns the scope after it.

    Why: before SGLang moved EAGLE-3's aux-capture set-up into functions of its own (0.5.23's
    ``resolve_spec_aux_hidden_state_config`` / ``configure_aux_hidden_state_capture``), it lived inline in
    ``ModelRunner`` (0.5.3-0.5.12), which cannot be constructed on a CPU. Running the engine's own statement
    keeps the observation the engine's code, not a restatement of it. No matching statement raises
    ``LookupError``.
    """
    from sglang.srt.model_executor import model_runner

    source = textwrap.dedent(inspect.getsource(model_runner.ModelRunner))
    found = [node for node in ast.walk(ast.parse(source)) if isinstance(node, ast.If) and select(node)]
    if len(found) != 1:
        raise LookupError(f"{len(found)} statements of this release's ModelRunner match (expected 1)")
    return _run_nodes(found, str(inspect.getsourcefile(model_runner)), model_runner, scope)


def run_method_statements(cls, method: str, first, last, scope: dict) -> dict:
    """Execute the top-level statements of ``cls.method`` from the first one ``first(node)`` picks through the
    next one ``last(node)`` picks, on the stand-in ``self`` in ``scope`` (e.g. 0.5.3's embed/head wiring, inline
    in ``EAGLEWorker.__init__`` between ``get_embed_and_head()`` and the ``set_embed`` branch)."""
    function = ast.parse(textwrap.dedent(inspect.getsource(getattr(cls, method)))).body[0]
    assert isinstance(function, ast.FunctionDef), f"{cls.__name__}.{method} is not a function"
    body = function.body
    start = next((i for i, node in enumerate(body) if first(node)), None)
    end = next((i for i, node in enumerate(body) if start is not None and i >= start and last(node)), None)
    if start is None or end is None:
        raise LookupError(f"{cls.__name__}.{method} has no statements from {first} to {last} in this release")
    module = importlib.import_module(cls.__module__)
    return _run_nodes(body[start:end + 1], str(inspect.getsourcefile(cls)), module, scope)


def runner_stand_in(**attrs):
    """A stand-in ``ModelRunner`` holding ``attrs``, whose other methods are the engine's own, bound to it (e.g.
    0.5.12's ``self._build_model_config(...)`` inside the aux-capture statement)."""
    from sglang.srt.model_executor import model_runner

    class RunnerStandIn(types.SimpleNamespace):
        def __getattr__(self, name):
            attr = getattr(model_runner.ModelRunner, name, None)
            if callable(attr):
                return types.MethodType(attr, self)
            raise AttributeError(f"the stand-in ModelRunner has no {name!r} (the statement needs more of it)")

    return RunnerStandIn(**attrs)


def mentions(node, *names: str) -> bool:
    """Whether the source of ``node`` mentions every one of ``names``."""
    text = ast.unparse(node)
    return all(n in text for n in names)


def ast_is_attribute(node, attr: str) -> bool:
    """Whether ``node`` is exactly ``self.<attr>``."""
    return (isinstance(node, ast.Attribute) and node.attr == attr and isinstance(node.value, ast.Name)
            and node.value.id == "self")


def rope_cache() -> dict | None:
    """SGLang's process-wide cache of rotary embeddings (``_ROPE_DICT``), wherever this release keeps it."""
    for name in ("sglang.srt.layers.rotary_embedding.factory", "sglang.srt.layers.rotary_embedding"):
        try:
            cache = getattr(importlib.import_module(name), "_ROPE_DICT", None)
        except ModuleNotFoundError:
            continue
        if isinstance(cache, dict):
            return cache
    return None


@contextlib.contextmanager
def meta_build_isolated():
    """Build on ``meta`` without leaving meta rotary embeddings in SGLang's rope cache.

    Why: the cache is keyed by rope parameters, not device; a draft built on CPU after a meta build of a target
    with the same rope (the wiring's target) would get the meta entry (0.5.9: ``Tensor on device meta is not on
    the expected device cpu!``). 0.5.23 discards such dead entries itself; in a server every model is on one
    device, so this only concerns our meta builds.
    """
    cache = rope_cache()
    before = set(cache) if cache is not None else set()
    try:
        yield
    finally:
        if cache is not None:
            for key in set(cache) - before:
                del cache[key]
