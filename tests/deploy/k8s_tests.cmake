# tests/deploy/k8s_tests.cmake, included by tests/deploy/CMakeLists.txt: the
# Kubernetes manifests of deploy/k8s, rendered with the
# kubectl on PATH (Debian 12's kubernetes-client is kubectl 1.20 with
# kustomize v2.0.3), validated offline against deploy/k8s/schemas with
# node-ajv, cross-checked (k8s_checks.js), the flags they pass checked
# against this build's binaries, and their ds_config.json resolved by this
# build's zeroshard-ctl. One test per overlay, and one that breaks
# the objects and requires every break to be reported. They skip (77) when
# kubectl, node, node-ajv or node-js-yaml is missing.
# node is looked for when the test runs (run_node.sh), not at configure: the
# test command installs it while CMake compiles (scripts/build.sh).
find_program(ZS_KUBECTL kubectl)
if(NOT ZS_KUBECTL)
  set(ZS_KUBECTL kubectl)  # looked for again when the test runs
endif()
set(zs_k8s_dir ${CMAKE_CURRENT_LIST_DIR})
set(zs_k8s ${CMAKE_SOURCE_DIR}/deploy/k8s/overlays)
function(zs_k8s_test name)
  add_test(NAME ${name}
    COMMAND sh ${zs_k8s_dir}/run_node.sh ${zs_k8s_dir}/k8s_manifests_test.js ${ARGN}
            --kubectl=${ZS_KUBECTL} --bin=$<TARGET_FILE:zeroshard-ctl>
            --bin=$<TARGET_FILE:zeroshard-server>
            --bin=$<TARGET_FILE:zeroshard-worker>)
  set_tests_properties(${name} PROPERTIES
    LABELS unit TIMEOUT 60 SKIP_RETURN_CODE 77)
endfunction()
zs_k8s_test(k8s_cpu_demo_manifests_test --overlay=${zs_k8s}/cpu-demo --comm=gloo --gpus=0)
zs_k8s_test(k8s_gpu_manifests_test --overlay=${zs_k8s}/gpu --comm=gloo --gpus=1)
zs_k8s_test(k8s_pytorch_manifests_test --overlay=${zs_k8s}/pytorch --comm=gloo --gpus=0 --torch)
zs_k8s_test(k8s_manifest_checks_fail_test --overlay=${zs_k8s}/cpu-demo --comm=gloo --gpus=0
            --mutations)
