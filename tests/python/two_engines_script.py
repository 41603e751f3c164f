"""Several engines in one process, as DeepSpeed's unit tests make them
(test_deepspeed_launchers.py runs it under zeroshard-launch, whose servers every
engine of the process shares): a model trained and closed, the same shapes
again from fresh values, then another model altogether. Each must equal
torch's AdamW over the same data. Writes OUT/ok.<rank> when they do.

    two_engines_script.py OUT
"""

import os
import sys

import torch

import zeroshard

out = sys.argv[1]
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])


def run(make, seed):
    torch.manual_seed(seed)
    model = make()
    ref = make()
    ref.load_state_dict(model.state_dict())
    opt = torch.optim.AdamW(ref.parameters(), lr=1e-2)
    engine, _, _, _ = zeroshard.initialize(
        model=model, optimizer=torch.optim.AdamW(model.parameters(), lr=1e-2),
        config={"train_micro_batch_size_per_gpu": 2, "gradient_clipping": 0,
                "zero_optimization": {"stage": 2}})
    g = torch.Generator().manual_seed(seed)
    for _ in range(3):
        xs = [torch.randn(2, 6, generator=g) for _ in range(world)]
        engine.backward(engine(xs[rank]).square().mean())
        engine.step()
        for x in xs:   # torch over every rank's batch, averaged
            (ref(x).square().mean() / world).backward()
        opt.step()
        opt.zero_grad()
    got = engine.consolidated_state_dict()
    engine.close()
    for n, p in ref.named_parameters():
        assert torch.allclose(got[n], p.detach(), rtol=0, atol=1e-6), n


run(lambda: torch.nn.Linear(6, 3), 1)
run(lambda: torch.nn.Linear(6, 3), 2)   # the same shapes, fresh values
run(lambda: torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(),
                                torch.nn.Linear(8, 2)), 3)
open(os.path.join(out, f"ok.{rank}"), "w").close()
