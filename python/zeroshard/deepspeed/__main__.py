"""`python3 -m zeroshard.deepspeed`: prints the folder to put on
PYTHONPATH so that `import deepspeed` is zeroshard's in processes another
launcher starts (torchrun):

    PYTHONPATH=$(python3 -m zeroshard.deepspeed) torchrun --nproc_per_node=2 train.py
"""

from . import SHIM_DIR

print(SHIM_DIR)
