"""The load tracer ties every loader call to the checkpoint tensor it served, however the engine schedules the
call. SGLang's DeepSeek/Kimi loaders (``deepseek_common/deepseek_weight_loader.py``) submit each parameter's
weight loader to a ``ThreadPoolExecutor`` while the tensors are still being fed; attribution by feeding order
alone gave the Kimi-K2.5 target's embedding to no key, or to the head's, from one run to the next."""

from __future__ import annotations

import concurrent.futures
import threading

import torch

from contracts.engines.load_tracer import ByObjectTracer, InOrderTracer
from contracts.observations import TensorFate


def default_weight_loader(param, loaded_weight):
    param.data.copy_(loaded_weight)


class PooledLoader(torch.nn.Module):
    """Loads as SGLang's DeepSeek loader does: every weight loader runs on a pool thread, and (to make the race
    certain) none runs before the last tensor was fed."""

    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Parameter(torch.zeros(4, 2))
        self.head = torch.nn.Parameter(torch.zeros(4, 2))

    def load_weights(self, weights):
        params = dict(self.named_parameters())
        fed = threading.Event()
        with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
            futures = []
            for name, tensor in weights:
                param = params[name.removesuffix(".weight")]
                futures.append(pool.submit(lambda p=param, t=tensor: (fed.wait(), p.weight_loader(p, t))))
            fed.set()
            for f in futures:
                f.result()


class DerivingLoader(PooledLoader):
    """Hands its loader a tensor it made from the one fed (a dtype cast), on the feeding thread."""

    def load_weights(self, weights):
        params = dict(self.named_parameters())
        for name, tensor in weights:
            param = params[name.removesuffix(".weight")]
            param.weight_loader(param, tensor.to(torch.float64).to(torch.float32))


def _fates(keys):
    return {k: TensorFate(key=k, shape=[4, 2], dtype="float32") for k in keys}


def _items(keys):
    return [(k, torch.full((4, 2), float(i + 1))) for i, k in enumerate(keys)]


def test_calls_on_pool_threads_are_tied_to_the_tensor_they_were_given():
    keys = ["embed.weight", "head.weight"]
    for tracer_cls in (InOrderTracer, ByObjectTracer):
        model = PooledLoader()
        fates = _fates(keys)
        assert tracer_cls(model, default_weight_loader).load(_items(keys), fates) is None
        assert {k: f.reached for k, f in fates.items()} == {"embed.weight": ["embed"], "head.weight": ["head"]}
        assert torch.equal(model.head.data, torch.full((4, 2), 2.0))


def test_a_tensor_the_engine_derived_is_tied_by_feeding_order_on_the_feeding_thread():
    keys = ["embed.weight", "head.weight"]
    fates = _fates(keys)
    assert InOrderTracer(DerivingLoader(), default_weight_loader).load(_items(keys), fates) is None
    assert {k: f.reached for k, f in fates.items()} == {"embed.weight": ["embed"], "head.weight": ["head"]}
    fates = _fates(keys)  # collected-then-loaded engines (vLLM) give no order to fall back on
    ByObjectTracer(DerivingLoader(), default_weight_loader).load(_items(keys), fates)
    assert {k: f.reached for k, f in fates.items()} == {"embed.weight": [], "head.weight": []}


def test_a_fed_tensor_leaves_the_map_when_it_dies():
    model = PooledLoader()
    tracer = ByObjectTracer(model, default_weight_loader)
    tensor = torch.ones(4, 2)
    list(tracer.feed([("embed.weight", tensor)], _fates(["embed.weight"])))
    assert id(tensor) in tracer.by_id
    key = id(tensor)
    del tensor
    assert key not in tracer.by_id
