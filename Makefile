# zeroshard: thin wrapper over the scripts (which also install missing Debian
# packages). `make demo` runs the main job, `make test` the whole test suite.
BUILD ?= build

.PHONY: all build demo test bench clean

all: build

build:
	bash scripts/build.sh $(BUILD)

demo:
	BUILD=$(BUILD) bash scripts/run-main.sh

test:
	bash scripts/test.sh $(BUILD)

bench: build
	bash scripts/bench.sh $(BUILD)

clean:
	rm -rf $(BUILD)
