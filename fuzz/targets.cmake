# libFuzzer targets, built by clang++ directly: the main build may use g++, whose objects cannot carry libFuzzer's
# instrumentation. Included by fuzz/CMakeLists.txt once clang++ and its fuzzer runtime are known to exist.
#
# afd_fuzz_target(<name>) compiles fuzz/<name>_fuzz.cpp with the repository sources listed in
# AFD_FUZZ_SOURCES_<name> into ${CMAKE_CURRENT_BINARY_DIR}/bin/<name>_fuzz (a folder of its own: Ninja already
# names the target's phony alias fuzz/<name>_fuzz), as part of ALL so that CI builds it. AFD_FUZZ_DEFINES_<name>
# adds compiler flags, AFD_FUZZ_LIBS_<name> libraries to link.
# With the tests, each target is also a ctest test `fuzz_<name>` (label `fuzz`, so in `scripts/dev.sh test`): a
# run of AFD_FUZZ_SHORT_RUN_SECONDS over a copy of fuzz/corpus/<corpus>/ (AFD_FUZZ_CORPUS_<name>, default <name>),
# each input bounded by AFD_FUZZ_INPUT_TIMEOUT_<name> seconds (default 10), through fuzz/short_run.cmake.
# Headers under src/core, src/http, src/model, src/transport, src/tokenizer and src/serve are dependencies, so editing
# one rebuilds the targets.

file(MAKE_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR}/bin)
set(AFD_FUZZ_SHORT_RUN_SECONDS 15 CACHE STRING "Seconds each fuzz target runs as a ctest test (label fuzz)")
file(GLOB afd_fuzz_headers CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/src/core/*.h ${PROJECT_SOURCE_DIR}/src/http/*.h
     ${PROJECT_SOURCE_DIR}/src/model/*.h ${PROJECT_SOURCE_DIR}/src/transport/*.h ${PROJECT_SOURCE_DIR}/src/tokenizer/*.h
     ${PROJECT_SOURCE_DIR}/src/serve/*.h)

function(afd_fuzz_target name)
    set(target ${name}_fuzz)
    set(sources ${CMAKE_CURRENT_SOURCE_DIR}/${target}.cpp)
    foreach(source ${AFD_FUZZ_SOURCES_${name}})
        list(APPEND sources ${PROJECT_SOURCE_DIR}/${source})
    endforeach()
    # Include folders of the packages, less the compiler's own /usr/include (naming it again breaks #include_next).
    set(fmt_includes "$<FILTER:$<TARGET_PROPERTY:fmt::fmt,INTERFACE_INCLUDE_DIRECTORIES>,EXCLUDE,^/usr/include/?$>")
    set(fmt_defines "$<TARGET_PROPERTY:fmt::fmt,INTERFACE_COMPILE_DEFINITIONS>")
    set(json_includes
        "$<FILTER:$<TARGET_PROPERTY:nlohmann_json::nlohmann_json,INTERFACE_INCLUDE_DIRECTORIES>,EXCLUDE,^/usr/include/?$>")
    set(output ${CMAKE_CURRENT_BINARY_DIR}/bin/${target})
    add_custom_command(
        OUTPUT ${output}
        COMMAND ${AFD_CLANGXX} -std=c++20 -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined
                -I${PROJECT_SOURCE_DIR}/src
                "$<$<BOOL:${fmt_includes}>:-I$<JOIN:${fmt_includes},;-I>>"
                "$<$<BOOL:${json_includes}>:-I$<JOIN:${json_includes},;-I>>"
                "$<$<BOOL:${fmt_defines}>:-D$<JOIN:${fmt_defines},;-D>>"
                ${AFD_FUZZ_DEFINES_${name}} ${sources} $<TARGET_LINKER_FILE:fmt::fmt> ${AFD_FUZZ_LIBS_${name}}
                -o ${output}
        DEPENDS ${sources} ${afd_fuzz_headers}
        COMMENT "Building libFuzzer target ${target}"
        COMMAND_EXPAND_LISTS
        VERBATIM)
    add_custom_target(${target} ALL DEPENDS ${output})

    if(AFD_BUILD_TESTS)
        set(corpus ${name})
        if(AFD_FUZZ_CORPUS_${name})
            set(corpus ${AFD_FUZZ_CORPUS_${name}})
        endif()
        set(input_timeout 10)
        if(AFD_FUZZ_INPUT_TIMEOUT_${name})
            set(input_timeout ${AFD_FUZZ_INPUT_TIMEOUT_${name}})
        endif()
        add_test(NAME fuzz_${name}
                 COMMAND ${CMAKE_COMMAND} -DFUZZER=${output} -DSEEDS=${CMAKE_CURRENT_SOURCE_DIR}/corpus/${corpus}
                         -DWORK=${CMAKE_CURRENT_BINARY_DIR}/short_run/${name} -DSECONDS=${AFD_FUZZ_SHORT_RUN_SECONDS}
                         -DINPUT_TIMEOUT=${input_timeout} -P ${CMAKE_CURRENT_SOURCE_DIR}/short_run.cmake)
        # TIMEOUT: the run, the seeds' first pass and the time to start, with room for a loaded machine.
        math(EXPR test_timeout "${AFD_FUZZ_SHORT_RUN_SECONDS} * 4 + 60")
        set_tests_properties(fuzz_${name} PROPERTIES LABELS fuzz TIMEOUT ${test_timeout})
    endif()
endfunction()

# The safetensors header parser (src/model/safetensors_format.h) on arbitrary bytes.
set(AFD_FUZZ_CORPUS_safetensors_header safetensors)
set(AFD_FUZZ_SOURCES_safetensors_header src/model/safetensors_format.cpp src/core/check.cpp src/core/dtype.cpp
    src/core/status.cpp src/core/tensor.cpp)
afd_fuzz_target(safetensors_header)

# ModelConfig::fromJson (src/model/model_config.h) on arbitrary text as a config.json.
set(AFD_FUZZ_SOURCES_model_config src/model/model_config.cpp src/core/check.cpp src/core/dtype.cpp
    src/core/json_fields.cpp src/core/mapped_file.cpp src/core/status.cpp src/core/unique_fd.cpp)
afd_fuzz_target(model_config)

# The AFD config parsers (src/transport/afd_config.h): the --additional-config wrapper and the bare afd object.
set(AFD_FUZZ_SOURCES_afd_config src/transport/afd_config.cpp src/transport/topology.cpp src/core/check.cpp
    src/core/json_fields.cpp src/core/mapped_file.cpp src/core/status.cpp src/core/unique_fd.cpp)
afd_fuzz_target(afd_config)

# The wire decoders (src/transport/frame.h): header, segment descriptors, hello payload.
set(AFD_FUZZ_SOURCES_frame src/transport/frame.cpp src/core/check.cpp src/core/dtype.cpp src/core/status.cpp)
afd_fuzz_target(frame)

# The http layer's server (src/http/http_server.h) on the bytes a client sends, over loopback. cpp-httplib is
# Debian's compiled library (cmake/AfdHttpDeps.cmake), linked as it is; its include folders go in less the
# compiler's own.
file(GLOB AFD_FUZZ_SOURCES_http_server RELATIVE ${PROJECT_SOURCE_DIR} CONFIGURE_DEPENDS
     ${PROJECT_SOURCE_DIR}/src/http/*.cpp)
list(APPEND AFD_FUZZ_SOURCES_http_server src/core/check.cpp src/core/env.cpp src/core/status.cpp)
set(AFD_FUZZ_DEFINES_http_server)
foreach(define ${AFD_HTTPLIB_DEFINES})
    list(APPEND AFD_FUZZ_DEFINES_http_server -D${define})
endforeach()
foreach(dir ${AFD_HTTPLIB_INCLUDE_DIRS})
    if(NOT dir IN_LIST CMAKE_CXX_IMPLICIT_INCLUDE_DIRECTORIES)
        list(APPEND AFD_FUZZ_DEFINES_http_server -I${dir})
    endif()
endforeach()
set(AFD_FUZZ_LIBS_http_server ${AFD_HTTPLIB_LIBRARY} -pthread)
set(AFD_FUZZ_INPUT_TIMEOUT_http_server 20)  # an input may take the server's 1 s read timeout and the 5 s bounds
afd_fuzz_target(http_server)

# The tokenizer (src/tokenizer/tokenizer.h) on arbitrary bytes, as text to encode and as ids to decode.
file(GLOB AFD_FUZZ_SOURCES_tokenizer RELATIVE ${PROJECT_SOURCE_DIR} CONFIGURE_DEPENDS
     ${PROJECT_SOURCE_DIR}/src/tokenizer/*.cpp)
list(APPEND AFD_FUZZ_SOURCES_tokenizer src/core/check.cpp src/core/json_fields.cpp src/core/mapped_file.cpp
     src/core/status.cpp src/core/unique_fd.cpp)
set(AFD_FUZZ_DEFINES_tokenizer -DPCRE2_CODE_UNIT_WIDTH=8 -DAFD_FUZZ_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
set(AFD_FUZZ_LIBS_tokenizer ${AFD_PCRE2_LIBRARY} ${AFD_UTF8PROC_LIBRARY})
afd_fuzz_target(tokenizer)

# The API server's request parser (src/serve/api_request.h) on arbitrary bytes as a chat-completions and as a
# completions body; accepted chats are rendered by the Qwen3 template and tokenized.
file(GLOB AFD_FUZZ_SOURCES_chat_request RELATIVE ${PROJECT_SOURCE_DIR} CONFIGURE_DEPENDS
     ${PROJECT_SOURCE_DIR}/src/tokenizer/*.cpp)
list(APPEND AFD_FUZZ_SOURCES_chat_request src/serve/api_request.cpp src/core/check.cpp src/core/json_fields.cpp
     src/core/mapped_file.cpp src/core/status.cpp src/core/unique_fd.cpp)
set(AFD_FUZZ_DEFINES_chat_request -DPCRE2_CODE_UNIT_WIDTH=8 -DAFD_FUZZ_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
set(AFD_FUZZ_LIBS_chat_request ${AFD_PCRE2_LIBRARY} ${AFD_UTF8PROC_LIBRARY})
afd_fuzz_target(chat_request)

# What the rendezvous parses off the wire: the store's requests and replies (src/transport/rendezvous_store_wire.h),
# a rank's record (src/transport/rendezvous_record.h) and the tcp backend's endpoint blob (parseHostPort).
set(AFD_FUZZ_SOURCES_rendezvous src/transport/rendezvous_store_wire.cpp src/transport/rendezvous_record.cpp
    src/transport/socket.cpp src/transport/wait_progress.cpp src/core/check.cpp src/core/env.cpp
    src/core/logging.cpp src/core/status.cpp src/core/unique_fd.cpp)
set(AFD_FUZZ_LIBS_rendezvous -pthread)
afd_fuzz_target(rendezvous)
