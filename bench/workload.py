"""The states the benchmarks save: a model plus its Adam state, and eight equal modules."""

from __future__ import annotations

from typing import Any

import torch

import cairn


def model_spec(num_params: int) -> list[tuple[str, tuple[int, ...]]]:
    """Names and shapes of a transformer-like model of about ``num_params`` float32 parameters.

    Mixed sizes: one large embedding, per-layer matrices of 1-4 M elements, and
    many small biases and norm weights (the tensors that cost per-tensor overhead).
    """
    d = 1024 if num_params >= 40_000_000 else 512 if num_params >= 6_000_000 else 256
    per_layer = 12 * d * d + 13 * d
    emb_rows = max(256, num_params // (10 * d))
    head_rows = max(64, num_params // (40 * d))
    rest = num_params - (emb_rows + head_rows) * d - d * 2
    layers = max(1, round(rest / per_layer))
    spec: list[tuple[str, tuple[int, ...]]] = [("embed.weight", (emb_rows, d))]
    for i in range(layers):
        p = f"layers.{i}."
        spec += [
            (p + "ln1.weight", (d,)),
            (p + "ln1.bias", (d,)),
            (p + "attn.qkv.weight", (3 * d, d)),
            (p + "attn.qkv.bias", (3 * d,)),
            (p + "attn.proj.weight", (d, d)),
            (p + "attn.proj.bias", (d,)),
            (p + "ln2.weight", (d,)),
            (p + "ln2.bias", (d,)),
            (p + "mlp.fc.weight", (4 * d, d)),
            (p + "mlp.fc.bias", (4 * d,)),
            (p + "mlp.proj.weight", (d, 4 * d)),
            (p + "mlp.proj.bias", (d,)),
        ]
    spec += [("norm.weight", (d,)), ("norm.bias", (d,)), ("head.weight", (head_rows, d))]
    return spec


def spec_params(spec: list[tuple[str, tuple[int, ...]]]) -> int:
    n = 0
    for _, shape in spec:
        c = 1
        for s in shape:
            c *= s
        n += c
    return n


def _fill(t: torch.Tensor, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    # uniform_ writes every element: the memory is touched, like a trained model's.
    return t.uniform_(-0.05, 0.05, generator=g)


class ModelAdamState(cairn.Checkpointable):
    """A model's parameters plus Adam's two moment buffers and step counters (torch layout).

    ``set_state`` copies into the existing tensors, as ``load_state_dict`` does.
    """

    def __init__(self, spec: list[list[Any]] | list[tuple[str, tuple[int, ...]]], fill: bool | str = True) -> None:
        self.spec = [(str(n), tuple(int(s) for s in shape)) for n, shape in spec]
        self.params: dict[str, torch.Tensor] = {}
        self.exp_avg: dict[str, torch.Tensor] = {}
        self.exp_avg_sq: dict[str, torch.Tensor] = {}
        self.steps: dict[str, torch.Tensor] = {}
        for i, (name, shape) in enumerate(self.spec):
            if fill == "fast":  # touched, cheap, not random (for memory measurements)
                self.params[name] = torch.full(shape, 0.01)
                self.exp_avg[name] = torch.full(shape, 0.001)
                self.exp_avg_sq[name] = torch.full(shape, 0.0001)
            elif fill:
                self.params[name] = _fill(torch.empty(shape), 3 * i)
                self.exp_avg[name] = _fill(torch.empty(shape), 3 * i + 1)
                self.exp_avg_sq[name] = _fill(torch.empty(shape), 3 * i + 2).abs_()
            else:
                self.params[name] = torch.empty(shape)
                self.exp_avg[name] = torch.empty(shape)
                self.exp_avg_sq[name] = torch.empty(shape)
            self.steps[name] = torch.tensor(1000.0)
        self.lr = 3e-4

    @property
    def nbytes(self) -> int:
        return sum(
            t.numel() * t.element_size() for d in (self.params, self.exp_avg, self.exp_avg_sq) for t in d.values()
        )

    def torch_state(self) -> dict[str, Any]:
        """What ``model.state_dict()`` plus ``optimizer.state_dict()`` would give."""
        names = [n for n, _ in self.spec]
        return {
            "model": dict(self.params),
            "optimizer": {
                "state": {
                    i: {"step": self.steps[n], "exp_avg": self.exp_avg[n], "exp_avg_sq": self.exp_avg_sq[n]}
                    for i, n in enumerate(names)
                },
                "param_groups": [
                    {
                        "lr": self.lr,
                        "betas": (0.9, 0.999),
                        "eps": 1e-8,
                        "weight_decay": 0.0,
                        "amsgrad": False,
                        "params": list(range(len(names))),
                    }
                ],
            },
        }

    def flat_tensors(self) -> dict[str, torch.Tensor]:
        """The same tensors under flat names (for safetensors and raw I/O)."""
        out: dict[str, torch.Tensor] = {}
        for n, _ in self.spec:
            out[f"model/{n}"] = self.params[n]
            out[f"adam/{n}/exp_avg"] = self.exp_avg[n]
            out[f"adam/{n}/exp_avg_sq"] = self.exp_avg_sq[n]
            out[f"adam/{n}/step"] = self.steps[n]
        return out

    def get_state(self, components: Any = None, *, not_components: Any = None, **kwargs: Any) -> dict[str, Any]:
        return self.torch_state()

    def get_state_buffers(self) -> dict[str, Any]:
        """The live tensors, laid out like get_state() (the opt-in of prototype P1)."""
        return self.torch_state()

    def set_state(self, state: dict[str, Any]) -> None:
        names = [n for n, _ in self.spec]
        if "model" in state:
            for n, t in state["model"].items():
                self.params[n].copy_(t)
        if "optimizer" in state:
            for i, st in state["optimizer"]["state"].items():
                n = names[int(i)]
                self.exp_avg[n].copy_(st["exp_avg"])
                self.exp_avg_sq[n].copy_(st["exp_avg_sq"])
                self.steps[n].copy_(st["step"])
            self.lr = float(state["optimizer"]["param_groups"][0]["lr"])

    def get_ctor_args_and_kwargs(self) -> tuple[tuple[Any, ...], dict[str, Any]]:
        # fill=False: from_checkpoint allocates without a random init (measures cairn, not init).
        return ([[n, list(s)] for n, s in self.spec],), {"fill": False}

    def checksum(self) -> float:
        """A cheap fingerprint, to check that a restore brought the values back."""
        return float(
            sum(float(t.view(-1)[:: max(1, t.numel() // 97)].double().sum()) for t in self.flat_tensors().values())
        )


class PlainModelAdamState(ModelAdamState):
    """The same state as a user's own component: ``set_state`` copies like ``load_state_dict``, no buffers.

    A restore reads into fresh arrays (the state then passes ``set_state``, which
    copies it into the live tensors): the path of every component that does not
    opt in with ``get_state_buffers``.
    """

    def get_state_buffers(self) -> None:  # type: ignore[override]
        return None


class Module(cairn.Checkpointable):
    """One of the eight equal modules: parameters and optimizer moments (torch tensors)."""

    def __init__(self, spec: list[Any], seed: int = 0, fill: bool = True) -> None:
        self.inner = ModelAdamState(spec, fill=fill)
        if fill:
            # Different values per module (ModelAdamState seeds by position only).
            for t in self.inner.flat_tensors().values():
                if t.dim():
                    t.add_(seed * 1e-3)
        self.seed = seed

    def get_state(self, components: Any = None, *, not_components: Any = None, **kwargs: Any) -> dict[str, Any]:
        return self.inner.torch_state()

    def get_state_buffers(self) -> dict[str, Any]:
        return self.inner.torch_state()

    def set_state(self, state: dict[str, Any]) -> None:
        self.inner.set_state(state)

    def get_ctor_args_and_kwargs(self) -> tuple[tuple[Any, ...], dict[str, Any]]:
        return ([[n, list(s)] for n, s in self.inner.spec],), {"seed": self.seed, "fill": False}


class EightModules(cairn.Checkpointable):
    """A container of eight equal modules, each a component (``m0`` ... ``m7``)."""

    def __init__(self, module_params: int, fill: bool = True) -> None:
        self.module_params = module_params
        spec = [[n, list(s)] for n, s in model_spec(module_params)]
        self.modules = {f"m{i}": Module(spec, seed=i, fill=fill) for i in range(8)}
        self.iteration = 0

    def get_checkpointable_components(self) -> list[tuple[str, cairn.Checkpointable]]:
        return list(self.modules.items())

    def get_state(self, components: Any = None, *, not_components: Any = None, **kwargs: Any) -> dict[str, Any]:
        return {"iteration": self.iteration, **self._get_components_state(components, not_components=not_components)}

    def set_state(self, state: dict[str, Any]) -> None:
        self.iteration = int(state.get("iteration", self.iteration))
        self._set_components_state(state)

    def get_ctor_args_and_kwargs(self) -> tuple[tuple[Any, ...], dict[str, Any]]:
        return (self.module_params,), {"fill": False}

    def module_nbytes(self, name: str) -> int:
        return self.modules[name].inner.nbytes


PPO_LIKE_SPEC = [
    ["pi.0.weight", [256, 4]], ["pi.0.bias", [256]], ["pi.1.weight", [256, 256]], ["pi.1.bias", [256]],
    ["pi.out.weight", [2, 256]], ["pi.out.bias", [2]], ["vf.0.weight", [256, 4]], ["vf.0.bias", [256]],
    ["vf.1.weight", [256, 256]], ["vf.1.bias", [256]], ["vf.out.weight", [1, 256]], ["vf.out.bias", [1]],
]  # fmt: skip


class SmallTree(EightModules):
    """An RL-sized checkpoint: four small policy+value modules with Adam state (5 folders, ~6.5 MB)."""

    def __init__(self, num_modules: int = 4, fill: bool = True) -> None:
        self.module_params = num_modules
        self.modules = {f"p{i}": Module(PPO_LIKE_SPEC, seed=i, fill=fill) for i in range(num_modules)}
        self.iteration = 0
