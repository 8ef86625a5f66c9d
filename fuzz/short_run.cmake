# A short run of one libFuzzer target, as a ctest test (label `fuzz`, registered by fuzz/targets.cmake): the target
# runs for a few seconds over a fresh copy of its committed seeds, so that the repository stays as it is and every
# run starts from the same corpus. Fails when the fuzzer reports a finding (a crash, a sanitizer report, a trap, a
# timeout, running out of memory); the input that caused it is kept in <work>/artifacts/.
#
# cmake -DFUZZER=<binary> -DSEEDS=<fuzz/corpus/name> -DWORK=<folder> -DSECONDS=<n> -DINPUT_TIMEOUT=<s> -P short_run.cmake
foreach(var FUZZER SEEDS WORK SECONDS INPUT_TIMEOUT)
    if(NOT DEFINED ${var})
        message(FATAL_ERROR "short_run.cmake: -D${var}=… is required")
    endif()
endforeach()
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK}/corpus ${WORK}/artifacts)
file(GLOB seeds ${SEEDS}/*)
if(NOT seeds)
    message(FATAL_ERROR "short_run.cmake: no seeds in ${SEEDS}")
endif()
file(COPY ${seeds} DESTINATION ${WORK}/corpus)
execute_process(
    COMMAND ${FUZZER} -max_total_time=${SECONDS} -max_len=4096 -timeout=${INPUT_TIMEOUT} -print_final_stats=1
            -artifact_prefix=${WORK}/artifacts/ ${WORK}/corpus
    RESULT_VARIABLE result)
if(NOT result EQUAL 0)
    message(FATAL_ERROR "${FUZZER} failed (${result}); the input is in ${WORK}/artifacts/")
endif()
