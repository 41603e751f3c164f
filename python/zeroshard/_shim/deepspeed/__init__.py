"""`import deepspeed` in the ranks `zeroshard-launch --deepspeed` starts
(this folder is on their PYTHONPATH, and nowhere else): the module, and
each of its submodules, is zeroshard.deepspeed's, one object under both
names."""

import sys

import zeroshard.deepspeed as _ds

for _name, _mod in list(sys.modules.items()):
    if _name.startswith("zeroshard.deepspeed."):
        sys.modules["deepspeed" + _name[len("zeroshard.deepspeed"):]] = _mod
sys.modules[__name__] = _ds
