# find_package(kiln) for an installed Kiln: the imported target kiln::kiln (library + headers).
include("${CMAKE_CURRENT_LIST_DIR}/kilnTargets.cmake")
