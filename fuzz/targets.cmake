# libFuzzer targets, built by clang++ directly: the main build may use g++, whose objects cannot carry libFuzzer's
# instrumentation. Included by fuzz/CMakeLists.txt once clang++ and its fuzzer runtime are known to exist.
#
# afd_fuzz_target(<name>) compiles fuzz/<name>_fuzz.cpp with the repository sources listed in
# AFD_FUZZ_SOURCES_<name> into ${CMAKE_CURRENT_BINARY_DIR}/bin/<name>_fuzz (a folder of its own: Ninja already
# names the target's phony alias fuzz/<name>_fuzz), as part of ALL so that CI builds it. AFD_FUZZ_DEFINES_<name>
# adds compiler flags, AFD_FUZZ_LIBS_<name> libraries to link.
# Headers under src/core, src/http, src/model, src/transport, src/tokenizer and src/serve are dependencies, so editing
# one rebuilds the targets.

file(MAKE_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR}/bin)
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
endfunction()

# The safetensors header parser (src/model/safetensors_format.h) on arbitrary bytes.
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
