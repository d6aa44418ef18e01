"""Parameters held by a loss: their state dict, and their gradients under GradCache and DDP.

A loss holds parameters of its own when it trains γ̂ of a learnable similarity on a plain model, the L2Dir NAP
head, or Revela's LM.
"""

from __future__ import annotations

import logging
from typing import Any

import torch
import torch.distributed as dist
from sentence_transformers.base.losses import CachedLossMixin
from torch import Tensor, nn
from torch.nn.parallel import DistributedDataParallel

logger = logging.getLogger(__name__)


# --- parameters held by the loss (γ̂ of a learnable similarity on a plain model, the L2Dir NAP head, Revela's LM) ---


def loss_held_named_parameters(loss: nn.Module) -> list[tuple[str, nn.Parameter]]:
    """Trainable parameters of ``loss`` that are not the model's, by name (a NAP head, Revela's LM, a loss-held γ̂).

    The Trainer optimises them (it builds the optimizer from ``loss.named_parameters()``), but neither saves them with
    the model nor synchronises them under DDP; :func:`loss_state_dict` and :func:`sync_loss_held_gradients` do.
    """
    model = getattr(loss, "model", None)
    in_model = {id(p) for p in model.parameters()} if isinstance(model, nn.Module) else set()
    return [(name, p) for name, p in loss.named_parameters() if p.requires_grad and id(p) not in in_model]


def loss_held_parameters(loss: nn.Module) -> list[nn.Parameter]:
    """Trainable parameters of ``loss`` that are not the model's (see :func:`loss_held_named_parameters`)."""
    return [p for _, p in loss_held_named_parameters(loss)]


def loss_state_dict(loss: nn.Module) -> dict[str, Tensor]:
    """The trainable state ``loss`` holds outside the model, as CPU tensors by name.

    The protocol: a loss may define ``loss_state_dict()`` and ``load_loss_state_dict(state)`` itself; otherwise its
    loss-held parameters (:func:`loss_held_named_parameters`) are its state. Empty for a loss without any.
    """
    if callable(getattr(type(loss), "loss_state_dict", None)):
        return loss.loss_state_dict()
    return {name: p.detach().cpu().contiguous() for name, p in loss_held_named_parameters(loss)}


def load_loss_state_dict(loss: nn.Module, state: dict[str, Tensor]) -> None:
    """Copy ``state`` (from :func:`loss_state_dict`) into ``loss`` in place, so an optimizer holding the parameters
    keeps optimising the same tensors.

    Raises:
        ValueError: a tensor holds NaN or ±inf (it would give NaN or zero gradients from the first step), or the
            names or shapes in ``state`` are not those of the loss's state. Nothing is copied then.
    """
    for name, tensor in state.items():
        if (tensor.is_floating_point() or tensor.is_complex()) and not bool(
            torch.isfinite(tensor.float() if tensor.element_size() == 1 else tensor).all()
        ):
            raise ValueError(
                f"the saved state of {type(loss).__name__} holds NaN or ±inf in {name!r}; training from it gives NaN "
                "or zero gradients. Restore an earlier checkpoint"
            )
    if callable(getattr(type(loss), "load_loss_state_dict", None)):
        loss.load_loss_state_dict(state)
        return
    params = dict(loss_held_named_parameters(loss))
    missing, unexpected = sorted(set(params) - set(state)), sorted(set(state) - set(params))
    reshaped = sorted(n for n in set(state) & set(params) if tuple(state[n].shape) != tuple(params[n].shape))
    if missing or unexpected or reshaped:
        raise ValueError(
            f"the saved state does not fit {type(loss).__name__}: missing {missing[:5]}, unexpected {unexpected[:5]}, "
            f"other shape {reshaped[:5]}; build the loss with the same settings (head shape, LM, similarity)"
        )
    with torch.no_grad():
        for name, tensor in state.items():
            params[name].copy_(tensor.to(device=params[name].device, dtype=params[name].dtype))


class _CarryGradients(torch.autograd.Function):
    """Identity on the loss value; its backward hands each loss-held parameter ``grad_output × g``.

    ``g`` is the gradient the GradCache step (2) computed for that parameter at unit scale. Whatever the caller
    multiplies the returned loss by before ``backward`` (the Trainer's 1/gradient_accumulation_steps, the fp16
    GradScaler's S, DDP/accelerate scaling) therefore reaches these parameters exactly as it reaches the backbone,
    whose cached gradients ST's backward hook scales by the same ``grad_output``.
    """

    @staticmethod
    def forward(ctx, loss: Tensor, grads: tuple[Tensor, ...], *params: Tensor) -> Tensor:  # type: ignore[override]
        ctx.grads = grads
        return loss.clone()

    @staticmethod
    def backward(ctx, grad_output: Tensor):  # type: ignore[override]
        return (grad_output, None, *(g * grad_output.to(g.dtype) for g in ctx.grads))


def forward_cached_scaled(loss: CachedLossMixin, features: list[dict[str, Any]], labels: Tensor | None) -> Tensor:
    """``loss.forward_cached`` whose returned loss also carries the gradient of the loss-held parameters.

    GradCache computes the loss and back-propagates it inside ``forward`` (step 2), so a parameter of the loss itself
    would receive its gradient there, at unit scale, bypassing the scale applied later to the returned loss
    (gradient accumulation, fp16 loss scaling). Here that step-2 gradient is taken out of ``.grad`` (earlier
    accumulated gradients are kept) and re-emitted through :class:`_CarryGradients` when the returned loss is
    back-propagated, scaled like everything else.
    """
    params = loss_held_parameters(loss) if torch.is_grad_enabled() else []
    if not params:
        return loss.forward_cached(features, labels)
    earlier = [p.grad for p in params]
    for p in params:
        p.grad = None
    loss.__dict__["_in_gradcache_step"] = True  # the step-2 backward is not the outer one: no process sync here
    try:
        value = loss.forward_cached(features, labels)
        step2 = [p.grad for p in params]
    finally:
        loss.__dict__["_in_gradcache_step"] = False
        for p, g in zip(params, earlier):
            p.grad = g
    carried = [(p, g) for p, g in zip(params, step2) if g is not None]
    if not carried:
        return value
    return _CarryGradients.apply(value, tuple(g for _, g in carried), *(p for p, _ in carried))


def _average_over_processes(loss: nn.Module, grad: Tensor) -> Tensor | None:
    if loss.__dict__.get("_in_gradcache_step", False) or not (dist.is_available() and dist.is_initialized()):
        return None
    world = dist.get_world_size()
    if world <= 1:
        return None
    grad = grad.clone()
    dist.all_reduce(grad)
    return grad / world


def sync_loss_held_gradients(loss: nn.Module) -> None:
    """Average the gradients of the loss-held parameters over processes, as DDP does for the model's.

    DDP wraps only the model, so without this each process would step γ̂ / the NAP head with its own local gradient
    and the copies would drift apart. With ``gather_across_devices=True`` each process's loss is its share of the
    global-batch loss (their mean is the loss of the full batch), so the average is the full-batch gradient.
    Registered (once per parameter) only when a process group with more than one process is running and the loss
    gathers or the model is wrapped in DDP; every process must then back-propagate the loss (they do under DDP).
    """
    if not (torch.is_grad_enabled() and dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1):
        return
    wrapped = isinstance(getattr(loss, "model", None), DistributedDataParallel)
    # a wrapper (MagnitudeMatryoshkaLoss) gathers when the loss it wraps does
    gathers = any(getattr(m, "gather_across_devices", False) for m in loss.modules())
    if not (gathers or wrapped):
        return
    hooked = loss.__dict__.setdefault("_synced_parameters", set())
    for p in loss_held_parameters(loss):
        if id(p) not in hooked:
            p.register_hook(lambda grad, _loss=loss: _average_over_processes(_loss, grad))
            hooked.add(id(p))
