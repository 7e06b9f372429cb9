"""Many models of one architecture as one batched computation: a member axis on every weight (torch.func).

    stacked = StackedModules(models, device)             # models: same class and config, own weights each
    losses = stacked.map(member_loss, ids, targets)       # member_loss(model, ids_i, targets_i) -> ()  => (S,)
    losses.sum().backward()                               # member i's gradient lands in slice i of every weight
    clip_per_member(stacked.grads(), 1.0); opt.step()     # an optimizer over stacked.param_list()
    stacked.unstack_into(models)                          # member i gets slice i back: ordinary models again

The members share no weight, so the gradient of the sum of their losses is each member's own gradient, in its own
slice; an elementwise optimizer (Adam, AdamW, SGD) on the stacked weights is each member's optimizer on its slice.
The forward passes run as one through torch.func.vmap (stack_module_state + functional_call), so member_loss must
be traceable by vmap: no .item(), no host reads of tensor values (MiniBert.forward_unchecked skips them), no
in-place updates of buffers (BatchNorm's running statistics).

qalib.lab.train_batched builds MiniBert's seed-batched trainer on this. The decoders' whole loop, train_stacked, is in
qalib.tools.stacked_decoders, beside the benchmark that uses it: on 2 CPU cores notebooks 12, 14 and 16's solo runs
side by side were faster (a stack per variant is fewer, larger jobs, which balance worse over the cores, and a
member's step was 6% dearer to 13% cheaper; `make bench ONLY=train` measures it). On a GPU, where the runs go one
after another, a stack is the way to run many seeds at once.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable, Sequence

import torch
from torch import nn
from torch.func import functional_call, stack_module_state, vmap
from torch.nn.attention import SDPBackend, sdpa_kernel

__all__ = ["StackedModules", "clip_per_member"]


class _Apply(nn.Module):
    """fn(model, *args) as a module whose parameters are the wrapped model's ("model.<name>"): what
    functional_call swaps each member's weights into."""

    def __init__(self, model: nn.Module, fn: Callable) -> None:
        super().__init__()
        self.model, self.fn = model, fn

    def forward(self, *args):
        return self.fn(self.model, *args)


class StackedModules:
    """The members' weights stacked, {name: (S, *shape)} leaves that require grad (buffers likewise), and vmap over
    them: map(fn, *args) -> fn's outputs with a leading member axis, member i computed with slice i."""

    def __init__(self, members: Sequence[nn.Module], device: torch.device | str = "cpu",
                 randomness: str = "error") -> None:
        members = list(members)
        if not members:
            raise ValueError("StackedModules needs at least one model")
        kinds = {type(m) for m in members}
        if len(kinds) != 1:
            raise ValueError(f"every member must be the same kind of model, got {sorted(k.__name__ for k in kinds)}")
        if hasattr(members[0], "cfg") and any(m.cfg != members[0].cfg for m in members):
            raise ValueError("every member must have the same config: the members run as one batched computation")
        shapes = [{k: tuple(v.shape) for k, v in m.state_dict().items()} for m in members]
        if any(s != shapes[0] for s in shapes):
            raise ValueError("every member must have the same weights' names and shapes")
        device = torch.device(device)
        params, buffers = stack_module_state(members)
        self.params = {name: p.detach().to(device).requires_grad_() for name, p in params.items()}
        self.buffers = {name: b.to(device) for name, b in buffers.items()}
        self.size = len(members)
        # the module vmap calls with each member's weights: a copy on the meta device (it holds no numbers)
        self._template = copy.deepcopy(members[0]).to("meta")
        self._template.train(members[0].training)
        self._randomness = randomness
        # vmap has no batching rule for the CPU's fused flash attention and would run it once per member; the
        # math kernel is matmuls and a softmax, which it batches
        self._cpu = device.type == "cpu"

    def param_list(self) -> list[torch.Tensor]:
        return list(self.params.values())

    def grads(self) -> list[torch.Tensor]:
        """The stacked gradients that exist (a weight no loss reached has none)."""
        return [p.grad for p in self.params.values() if p.grad is not None]

    def map(self, fn: Callable, *args, in_dims: Sequence | None = None):
        """vmap of fn(model, *member_args) over the members: each tensor in args has the member axis first (S, ...),
        unless in_dims says otherwise (None: the same value for every member)."""
        module = _Apply(self._template, fn)
        state = ({f"model.{k}": v for k, v in self.params.items()}, {f"model.{k}": v for k, v in self.buffers.items()})
        dims = tuple(0 for _ in args) if in_dims is None else tuple(in_dims)
        if len(dims) != len(args):
            raise ValueError(f"in_dims has {len(dims)} entries for {len(args)} arguments")

        def one(member_params, member_buffers, *member_args):
            return functional_call(module, (member_params, member_buffers), member_args)

        kernel = sdpa_kernel([SDPBackend.MATH]) if self._cpu else contextlib.nullcontext()
        with kernel:
            return vmap(one, in_dims=(0, 0, *dims), randomness=self._randomness)(*state, *args)

    @torch.no_grad()
    def unstack_into(self, members: Sequence[nn.Module]) -> None:
        """Member i gets slice i of every weight and buffer (moved to the stacked weights' device)."""
        if len(members) != self.size:
            raise ValueError(f"{len(members)} models for {self.size} stacked members")
        for i, member in enumerate(members):
            member.to(next(iter(self.params.values())).device)
            for name, p in member.named_parameters():
                p.copy_(self.params[name][i])
            for name, b in member.named_buffers():
                b.copy_(self.buffers[name][i])


@torch.no_grad()
def clip_per_member(grads: list[torch.Tensor], max_norm: float) -> None:
    """Each member's gradients (slice i of every stacked gradient) scaled as torch.nn.utils.clip_grad_norm_ scales
    one model's: by min(1, max_norm / (its global L2 norm + 1e-6)), the norm over all its parameters."""
    s = grads[0].shape[0]
    norms = torch.stack([torch.linalg.vector_norm(g.reshape(s, -1), dim=1) for g in grads])  # (P, S): per parameter
    total = torch.linalg.vector_norm(norms, dim=0)                                            # (S,): per member
    scale = (max_norm / (total + 1e-6)).clamp(max=1.0)                                        # (S,)
    for g in grads:
        g.mul_(scale.view(s, *([1] * (g.dim() - 1))))  # (S,) -> (S, 1, ...): broadcast over the member's slice
