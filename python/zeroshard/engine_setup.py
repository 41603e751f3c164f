"""What the engine settles before it starts anything: its rank, its config
text, the optimizer section a torch optimizer object stands for, the
tensor class of each parameter, and the parameters the flat buffers cannot
hold (each refused naming the parameter or module)."""

import json
import os

import torch


def rank_and_world():
    """RANK and WORLD_SIZE from the environment (torchrun's names), 0 and 1
    when unset."""
    try:
        rank = int(os.environ.get("RANK", "0"))
        world = int(os.environ.get("WORLD_SIZE", "1"))
    except ValueError as e:
        raise ValueError(f"RANK / WORLD_SIZE: {e}") from None
    if world < 1 or not 0 <= rank < world:
        raise ValueError(f"RANK={rank} WORLD_SIZE={world}: need 0 <= RANK < "
                         "WORLD_SIZE")
    return rank, world


def config_text(config, args):
    if config is None and args is not None:
        config = getattr(args, "deepspeed_config", None) or getattr(
            args, "zeroshard_config", None)
    if config is None:
        raise ValueError("zeroshard.initialize: no config (a path or a dict)")
    if isinstance(config, dict):
        return json.dumps(config), "config"
    if isinstance(config, (str, os.PathLike)):
        with open(config) as f:
            return f.read(), os.fspath(config)
    raise TypeError(f"config must be a path or a dict, not {type(config).__name__}")


def tensor_class(name, p):
    # The class names the servers' default parameter groups (Hugging Face's):
    # 1-D tensors do not decay.
    use_muon = getattr(p, "use_muon", None)
    if use_muon is not None:
        # DeepSpeed's Muon asks the script to mark every parameter: True
        # for Muon (the matrices' rule), False for AdamW (a weight of two
        # dimensions or more then goes with the embeddings, which decay).
        if use_muon and p.dim() < 2:
            raise ValueError(
                f"parameter {name} has use_muon=True but {p.dim()} "
                "dimension(s): Muon updates matrices (and convolution "
                "kernels)")
        if p.dim() >= 2:
            return "matrices" if use_muon else "embeddings"
    if p.dim() <= 1:
        return "norms" if "norm" in name.lower() or "ln" in name.lower() else "biases"
    if "emb" in name.lower() or "wte" in name or "wpe" in name:
        return "embeddings"
    return "matrices"


def registered_rules():
    """The servers' registered rules (common/optimizer_rules.h), as the
    extension describes them: name, types, torch_class, params, fixed,
    slots."""
    from . import _zeroshard
    return _zeroshard.optimizer_rules()


def registered_rule_of(optimizer):
    """The registered rule whose torch class the object is exactly (the
    class, not a subclass, whose step could differ), or None."""
    for r in registered_rules():
        if r["torch_class"] and type(optimizer) is getattr(
                torch.optim, r["torch_class"], None):
            return r
    return None


def optimizer_rule(optimizer):
    """The servers' rule for a torch optimizer object, as the registry
    describes it: the rule whose torch class the object is (torch.optim.
    AdamW, Adam, SGD, Adagrad), or the one DeepSpeed's FusedAdam /
    DeepSpeedCPUAdam / DeepSpeedCPUAdagrad from zeroshard.deepspeed.ops
    name; a ValueError naming the class and the rules there are otherwise
    (never the default in its place)."""
    name = getattr(type(optimizer), "_zeroshard_rule", None)
    if callable(name):
        name = name(optimizer)
    if name is not None:
        r = next((x for x in registered_rules() if x["name"] == name), None)
    else:
        r = registered_rule_of(optimizer)
    if r is None:
        rules = registered_rules()
        classes = ", ".join(f"torch.optim.{x['torch_class']}"
                            for x in rules if x["torch_class"])
        types = ", ".join(t for x in rules for t in x["types"])
        raise ValueError(
            f"optimizer: {type(optimizer).__module__}."
            f"{type(optimizer).__name__} is not a rule the servers run; "
            f"they run {classes} (and DeepSpeed's FusedAdam / "
            "DeepSpeedCPUAdam / DeepSpeedCPUAdagrad), or the config's "
            f"\"optimizer\" section ({types})")
    return r


def _registered_section(optimizer, r):
    """A registered rule's section from a torch optimizer of its class: the
    params its description names, from the first group (lr, weight_decay
    and eps also travel per group, step by step; the others are one value
    for the run, so every group must agree on them)."""
    groups = optimizer.param_groups
    params = {}
    for p in r["params"]:
        name = p["name"]
        values = [g[name] for g in groups if name in g]
        if not values:
            continue
        if not p["common"]:
            if any(v != values[0] for v in values):
                raise ValueError(
                    f"optimizer: the param_groups differ in {name} "
                    f"({values}); the servers apply one {name} for the run "
                    "(lr, weight_decay, eps and betas may differ by group)")
        if p["pair"]:
            params[name] = [float(x) for x in values[0]]
        else:
            params[name] = bool(values[0]) if p["bool"] else float(values[0])
    for i, g in enumerate(groups):
        for name, value in r["fixed"].items():
            if name in g and float(g[name]) != value:
                raise ValueError(
                    f"optimizer: param_groups[{i}] has {name}={g[name]}, "
                    f"which the servers' {r['name']} does not run")
    if r["mode_param"]:
        # DeepSpeed's "Adam" is AdamW unless told otherwise: torch's Adam is
        # the L2 rule.
        params[r["mode_param"]] = False
    return {"type": r["types"][0], "params": params}


def torch_optimizer_section(optimizer):
    """DeepSpeed's "optimizer" section for a torch optimizer object: its
    rule and its first group's values (each group's own lr, weight decay,
    eps and betas travel with the group)."""
    return _registered_section(optimizer, optimizer_rule(optimizer))


def same_optimizer(configured, given):
    """An optimizer object and the config's "optimizer" section must agree:
    the first field that differs is named."""
    if str(configured.get("type", "")).lower() != given["type"].lower():
        raise ValueError(
            f"optimizer: the object passed is torch.optim.{given['type']} but "
            f"the config's optimizer.type is {configured.get('type')!r}")
    mine = configured.setdefault("params", {})
    for key, value in given["params"].items():
        if key not in mine:
            mine[key] = value   # what the config leaves out, the object says
            continue
        theirs = mine[key]
        if theirs == "auto":
            mine[key] = value   # "auto" takes the object's value
            continue
        if key == "betas":
            same = [float(x) for x in theirs] == [float(x) for x in value]
        else:
            same = float(theirs) == float(value)
        if not same:
            raise ValueError(
                f"optimizer: the object passed has {key}={value} but the "
                f"config's optimizer.params.{key} is {theirs}")


def check_parameters(model, trainable, names):
    """Refuses what the flat buffers cannot hold, naming the parameter
    or module, before any server is started."""
    for mname, mod in model.named_modules():
        if getattr(mod, "sparse", False) is True and any(
                p.requires_grad for p in mod.parameters(recurse=False)):
            raise ValueError(
                f"module {mname or 'root'} ({type(mod).__name__}) has "
                "sparse=True: its gradients would be sparse, and the "
                "servers take dense gradients")
    devices = {p.device for p in trainable}
    if len(devices) > 1:
        where = {}
        for p in trainable:
            where.setdefault(p.device, names.get(id(p), "?"))
        raise ValueError(
            "the parameters are on more than one device: " + ", ".join(
                f"{n} on {d}" for d, n in where.items()))
    for p in trainable:
        n = names.get(id(p), "?")
        if p.device.type not in ("cpu", "cuda"):
            raise NotImplementedError(
                f"parameter {n} is on {p.device}: the engine trains CPU "
                "and CUDA tensors")
        if p.dtype not in (torch.float32, torch.bfloat16, torch.float16):
            raise ValueError(
                f"parameter {n} is {p.dtype}: the engine trains "
                "float32, bfloat16 or float16 parameters")
        if p.is_sparse or not p.is_contiguous():
            raise ValueError(
                f"parameter {n} is not a contiguous dense tensor: call "
                ".contiguous() on it (or its module's) before initialize")


# The front-end's zeroshard.timeouts.step_seconds when the config gives none:
# a normal step's calls take well under a second on one host.
STEP_SECONDS_DEFAULT = 30.0

# The DeepSpeed release whose defaults the front-end follows (docs/PYTORCH.md).
DEEPSPEED_DEFAULTS_VERSION = "0.19"


def deepspeed_defaults(doc, client_scheduler=False, client_optimizer=False):
    """DeepSpeed 0.19's defaults where the config `doc` (changed in place)
    is silent, and what it cannot mean here refused. Returns (the ZeRO stage
    DeepSpeed would run, lines to say once):

    - no zero_optimization (or no stage in it) is stage 0, as DeepSpeed's:
      every rank keeps whole parameters and gradients, which is stage 1
      here (the optimizer is on the servers either way);
    - gradient_clipping absent is 1.0 (an explicit 0 turns it off);
    - Adam / AdamW / Lion without weight_decay is 0 (DeepSpeed's optimizers'
      default), and a WarmupLR / WarmupDecayLR warmup_max_lr unlike the
      optimizer's lr wins;
    - zeroshard.timeouts.step_seconds absent is STEP_SECONDS_DEFAULT;
    - a client scheduler wins over the config's "scheduler", as in
      DeepSpeed;
    - WarmupDecayLR and WarmupCosineLR need total_num_steps (or the run's
      length in zeroshard.steps): the front-end assumes no run length
      (WarmupLR has no end and needs none)."""
    notes = []
    zero = doc.get("zero_optimization")
    if zero is not None and not isinstance(zero, dict):
        raise ValueError("config key \"zero_optimization\": an object")
    stage = None if zero is None else zero.get("stage")
    if stage is None or (not isinstance(stage, bool) and stage == 0):
        doc.setdefault("zero_optimization", {})["stage"] = 1
        notes.append(
            "ZeRO stage 0 (" + ("no zero_optimization section" if zero is None
                                else "zero_optimization.stage " +
                                ("0" if stage is not None else "absent")) +
            ", DeepSpeed's default): every rank keeps whole parameters and "
            "gradients, as under stage 1; the optimizer runs on the shard "
            "servers")
        ds_stage = 0
    else:
        ds_stage = stage
    if "gradient_clipping" not in doc:
        doc["gradient_clipping"] = 1.0
    # A server that stops answering fails the step within this bound (each
    # call's deadline), naming it; zeroshard-train's default is 300 s.
    z = doc.setdefault("zeroshard", {})
    if isinstance(z, dict) and isinstance(z.get("timeouts", {}), dict):
        z.setdefault("timeouts", {}).setdefault("step_seconds",
                                                STEP_SECONDS_DEFAULT)
    opt = doc.get("optimizer")
    if not client_optimizer and isinstance(opt, dict) and str(
            opt.get("type", "")).lower() in (
            "adam", "adamw", "lion", "adamw8bit", "adam8bit"):
        params = opt.setdefault("params", {})
        if isinstance(params, dict):
            # DeepSpeed's FusedAdam / CPUAdam / Lion default (torch's AdamW
            # object's 0.01 comes with the object).
            params.setdefault("weight_decay", 0.0)
    sched = doc.get("scheduler")
    if (isinstance(sched, dict) and isinstance(opt, dict)
            and sched.get("type") in ("WarmupLR", "WarmupDecayLR")
            and isinstance(sched.get("params"), dict)
            and isinstance(opt.get("params"), dict)):
        top = sched["params"].get("warmup_max_lr")
        mine = opt["params"].get("lr")
        if isinstance(top, (int, float)) and isinstance(mine, (int, float)) \
                and top != mine:
            # DeepSpeed's scheduler sets every group's lr from step 1 on:
            # warmup_max_lr wins over the optimizer's.
            opt["params"]["lr"] = top
            notes.append(f"scheduler.params.warmup_max_lr {top} is the peak "
                         f"learning rate (optimizer.params.lr {mine} is "
                         "overridden, as in DeepSpeed)")
    if sched is not None and client_scheduler:
        del doc["scheduler"]
        notes.append("the lr_scheduler passed to initialize is used; the "
                     "config's \"scheduler\" section is not (as in DeepSpeed)")
    elif isinstance(sched, dict):
        kind = sched.get("type")
        params = sched.get("params") or {}
        z = doc.setdefault("zeroshard", {})
        warmup = params.get("warmup_num_steps", 1000) if isinstance(
            params, dict) else None
        if kind == "WarmupLR" and "steps" not in z and isinstance(
                warmup, int) and not isinstance(warmup, bool) and warmup > 100:
            # WarmupLR has no end: the parser's run length (100 steps
            # unless zeroshard.steps says) must not shorten its warmup.
            z["steps"] = warmup
        steps = (doc.get("zeroshard") or {}).get("steps")
        if kind in ("WarmupDecayLR", "WarmupCosineLR") and steps is None and (
                not isinstance(params, dict)
                or params.get("total_num_steps") in (None, "auto")):
            raise ValueError(
                f"config key \"scheduler.params.total_num_steps\": "
                f"{kind} needs it (the steps its decay spans), or the run's "
                "length in zeroshard.steps; the front-end assumes none")
    return ds_stage, notes


def autocast_dtype(doc):
    """DeepSpeed's "torch_autocast" section (removed from `doc`): the dtype
    the forward runs under torch.autocast in, or None. The parameters, their
    gradients and the servers' masters stay FP32; it cannot be combined
    with bf16 / fp16, which cast the module instead."""
    section = doc.pop("torch_autocast", None)
    if section is None:
        return None
    if not isinstance(section, dict):
        raise ValueError("config key \"torch_autocast\": an object")
    unknown = set(section) - {"enabled", "dtype", "lower_precision_safe_modules"}
    if unknown:
        raise ValueError(f"config key \"torch_autocast.{sorted(unknown)[0]}\": "
                         "unknown (enabled, dtype, lower_precision_safe_modules)")
    if not section.get("enabled", False):
        return None
    names = {"bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
             "torch.bfloat16": torch.bfloat16, "float16": torch.float16,
             "fp16": torch.float16, "torch.float16": torch.float16}
    dtype = names.get(str(section.get("dtype", "bfloat16")))
    if dtype is None:
        raise ValueError(f"config key \"torch_autocast.dtype\": "
                         f"{section.get('dtype')!r} (bfloat16 or float16)")
    for key in ("bf16", "bfloat16", "fp16"):
        if isinstance(doc.get(key), dict) and doc[key].get("enabled") is True:
            raise ValueError(f"config keys \"torch_autocast\" and \"{key}\": "
                             "give one (autocast keeps FP32 parameters, "
                             f"{key} casts the module)")
    return dtype
