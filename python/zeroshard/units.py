"""The units of the PyTorch front-end's flat layout, and activation
checkpointing by unit.

A unit is the set of parameters the servers version together and that
stage 3 gathers together. zeroshard.units (a key of the config's
"zeroshard" section that only the front-end reads) chooses them:

- absent: one unit per module that owns parameters directly;
- a list of module names or fnmatch patterns ("transformer.h.*"): each
  matching module, outermost first, is a unit of every trainable parameter
  under it; parameters outside them fall back to the per-module rule;
- {"min_params": N}: FSDP's size-based auto-wrap: walking the modules
  children first, a module becomes a unit when the parameters under it not
  yet in a unit number at least N; the root takes what is left.

A tied parameter (one tensor under two modules) is one tensor of the
layout, in the unit of the first module that names it; under stage 3 the
other module's read of it gathers that unit (stage3.py). A container
(ModuleList, ModuleDict) has no forward of its own: {"min_params": N}
never makes one a unit, and a unit named in the list may not be one.

Activation checkpointing (zeroshard.activation_checkpointing.policy): the
blocks are the named units ("every_block": each; "every_k": every k-th);
each such module's forward runs under torch.utils.checkpoint (the
re-entrant form, which runs the module's hooks again when it recomputes,
so stage 3 gathers its parameters for the recomputation too).
"""

import fnmatch

import torch
import torch.utils.checkpoint


def _runs(mod):
    """Whether the module has a forward of its own to run: a container
    (ModuleList, ModuleDict, ParameterList) has none, so as a unit its
    hooks would never fire."""
    return type(mod).forward is not torch.nn.Module.forward


def _module_index(model):
    return {id(m): i for i, (_, m) in enumerate(model.named_modules())}


def plan_units(model, chosen, spec):
    """[(unit name, module, [parameters], named)] in module order (named:
    chosen by the spec rather than the per-module rule); `chosen` holds
    the ids of the parameters that train. Raises ValueError naming a pattern
    that matches no module."""
    modules = list(model.named_modules())
    seen = set()
    plan = []   # (module pre-order index, name, module, params)
    index = _module_index(model)

    def claim(mod, recurse):
        got = []
        for _, p in mod.named_parameters(recurse=recurse):
            if id(p) in chosen and id(p) not in seen:
                seen.add(id(p))
                got.append(p)
        return got

    if isinstance(spec, (list, tuple)):
        if not spec or not all(isinstance(s, str) for s in spec):
            raise ValueError(
                "zeroshard.units: a non-empty list of module names or "
                "patterns, or {\"min_params\": N}")
        matched = {s: 0 for s in spec}
        taken = []   # names of modules already units (their children are not)
        for name, mod in modules:
            if any(name == t or name.startswith(t + ".") for t in taken if t):
                continue
            hit = [s for s in spec if name and fnmatch.fnmatchcase(name, s)]
            if not hit:
                continue
            if not _runs(mod):
                raise ValueError(
                    f"zeroshard.units: {name} ({type(mod).__name__}) has no "
                    "forward of its own, so it never runs as a unit: name "
                    f"its members ({name}.*) or the module that uses it")
            for s in hit:
                matched[s] += 1
            taken.append(name)
            params = claim(mod, True)
            if params:
                plan.append((index[id(mod)], name, mod, params, True))
        missing = [s for s, n in matched.items() if n == 0]
        if missing:
            names = [n for n, _ in modules if n][:8]
            raise ValueError(
                f"zeroshard.units: {missing[0]!r} names no module of the "
                f"model (its modules include {', '.join(names)})")
    elif isinstance(spec, dict):
        if set(spec) != {"min_params"} or not isinstance(
                spec["min_params"], int) or spec["min_params"] < 1:
            raise ValueError(
                "zeroshard.units: {\"min_params\": N} with N >= 1 an integer")
        n_min = spec["min_params"]

        def visit(name, mod):
            for cname, child in mod.named_children():
                visit(f"{name}.{cname}" if name else cname, child)
            pending = sum(p.numel() for _, p in mod.named_parameters()
                          if id(p) in chosen and id(p) not in seen)
            # A container never runs: its members (or its parent) are units.
            if (pending >= n_min and _runs(mod)) or (mod is model and pending):
                plan.append((index[id(mod)], name or "root", mod,
                             claim(mod, True), True))
        visit("", model)
    elif spec is not None:
        raise ValueError(
            "zeroshard.units: a list of module names or patterns, or "
            "{\"min_params\": N}")
    # The rest: one unit per module owning parameters directly.
    for name, mod in modules:
        params = claim(mod, False)
        if params:
            plan.append((index[id(mod)], name or "root", mod, params, False))
    plan.sort(key=lambda x: x[0])
    return [(n, m, ps, named) for _, n, m, ps, named in plan]


def _checkpointed(forward):
    from .stage3 import gather_on_access

    def recomputable(*args, **kwargs):
        # Its recomputation (inside the backward) may read parameters of
        # other units, as its first run did.
        with gather_on_access():
            return forward(*args, **kwargs)

    def run(*args, **kwargs):
        if not torch.is_grad_enabled() or not any(
                isinstance(a, torch.Tensor) and a.requires_grad for a in args):
            # Nothing to recompute for (no input needs a gradient): the
            # re-entrant form would drop the parameters' gradients.
            return forward(*args, **kwargs)
        for k, v in kwargs.items():
            if isinstance(v, torch.Tensor) and v.requires_grad:
                raise ValueError(
                    f"activation checkpointing: keyword argument {k!r} needs "
                    "a gradient; pass it positionally")
        if kwargs:
            return torch.utils.checkpoint.checkpoint(
                lambda *a: recomputable(*a, **kwargs), *args,
                use_reentrant=True)
        return torch.utils.checkpoint.checkpoint(recomputable, *args,
                                                 use_reentrant=True)
    run.zeroshard_checkpointed = True
    return run


def apply_checkpointing(plan, policy, k):
    """Wraps the blocks' forwards (the named units'); returns their names."""
    if policy == "none":
        return []
    # The root is no block: it is the whole forward.
    blocks = [(name, mod) for name, mod, _, named in plan
              if named and name != "root"]
    if not blocks:
        raise ValueError(
            f"activation_checkpointing.policy \"{policy}\": the blocks are the "
            "units you name: set zeroshard.units (module names, patterns, or "
            "{\"min_params\": N})")
    every = 1 if policy == "every_block" else max(int(k), 1)
    wrapped = []
    for i, (name, mod) in enumerate(blocks):
        if i % every:
            continue
        if getattr(mod.forward, "zeroshard_checkpointed", False):
            continue
        mod.forward = _checkpointed(mod.forward)
        wrapped.append(name)
    return wrapped
