# Multi-host runs on one machine (tests/multinode/): two network namespaces joined by a bridge act as
# two hosts and mpirun starts ranks on both through a hostfile, talking TCP over the bridge. Needs
# root and iproute2; elsewhere the tests report SKIP (exit 77). Each test removes everything it
# made (also when it fails or is interrupted; a run killed outright is swept by the next one).
set(MULTINODE_DIR ${CMAKE_CURRENT_LIST_DIR})
foreach(name layout link_cut)
  add_test(NAME multinode.${name}
           COMMAND bash ${MULTINODE_DIR}/${name}.sh $<TARGET_FILE:lattice> ${MPIEXEC_EXECUTABLE}
                   ${CMAKE_CURRENT_BINARY_DIR}/scratch/multinode_${name})
endforeach()
# lattice launch: host b's ranks killed, a rank stopped, host b's cable cut, too few ranks left.
add_test(NAME multinode.launch
         COMMAND bash ${MULTINODE_DIR}/launch.sh $<TARGET_FILE:lattice> ${MPIEXEC_EXECUTABLE}
                 ${CMAKE_CURRENT_BINARY_DIR}/scratch/multinode_launch)
set_tests_properties(multinode.launch PROPERTIES TIMEOUT 400 SKIP_RETURN_CODE 77 RESOURCE_LOCK lattice_multinode
                                                RUN_SERIAL TRUE)
add_test(NAME multinode.harness
         COMMAND bash ${MULTINODE_DIR}/harness.sh ${MPIEXEC_EXECUTABLE} ${CMAKE_CURRENT_BINARY_DIR}/scratch/multinode_harness)
# One at a time: link_cut times how fast ranks die, and the machine has few cores.
set_tests_properties(multinode.layout multinode.link_cut multinode.harness PROPERTIES
                     TIMEOUT 120 SKIP_RETURN_CODE 77 RESOURCE_LOCK lattice_multinode
                     RUN_SERIAL TRUE)
