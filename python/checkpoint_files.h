// The binding that reads a checkpoint folder without any server
// (read_checkpoint_masters: every shard file verified against the manifest,
// then each one's FP32 masters); python/checkpoint_files.cc.
#ifndef ZEROSHARD_PYTHON_CHECKPOINT_FILES_H_
#define ZEROSHARD_PYTHON_CHECKPOINT_FILES_H_

#include <pybind11/pybind11.h>

namespace zeroshard {

void BindCheckpointFiles(pybind11::module_& m);

}  // namespace zeroshard

#endif  // ZEROSHARD_PYTHON_CHECKPOINT_FILES_H_
