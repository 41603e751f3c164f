# The container image (deploy/docker): image_test builds the zeroshard-server
# image with podman (deploy/docker/build-images.sh, from git HEAD; an image
# already built from that commit is reused) and checks it from its mounted
# root. Needs root, podman and mmdebstrap, else it skips; a build takes
# ~10 min on 2 cores. `ctest -LE image` leaves it out.
# With the binaries' directory it also runs the multi-host run with its
# servers started from the image root.
add_test(NAME image_test COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/image_test.sh
         $<TARGET_FILE_DIR:zeroshard-worker>)
set_tests_properties(image_test PROPERTIES
  LABELS image TIMEOUT 2400 SKIP_RETURN_CODE 77 RUN_SERIAL TRUE)
