# The tokenizer's C libraries from Debian (scripts/setup.sh installs them): PCRE2 (8-bit code units) for the
# pre-tokenizer's regular expressions and utf8proc for Unicode normalization. Found by find_path / find_library so
# that CMAKE_PREFIX_PATH finds an unpacked copy too (scripts/stage_gpu_deps.sh). Defines the imported targets
# afd::pcre2 and afd::utf8proc, and AFD_PCRE2_LIBRARY / AFD_UTF8PROC_LIBRARY for builds outside CMake's targets
# (fuzz/targets.cmake).
find_path(AFD_PCRE2_INCLUDE_DIR pcre2.h)
find_library(AFD_PCRE2_LIBRARY NAMES pcre2-8)
find_path(AFD_UTF8PROC_INCLUDE_DIR utf8proc.h)
find_library(AFD_UTF8PROC_LIBRARY NAMES utf8proc)
if(NOT AFD_PCRE2_INCLUDE_DIR OR NOT AFD_PCRE2_LIBRARY)
    message(FATAL_ERROR "afd: PCRE2 not found (pcre2.h, libpcre2-8): install libpcre2-dev (scripts/setup.sh)")
endif()
if(NOT AFD_UTF8PROC_INCLUDE_DIR OR NOT AFD_UTF8PROC_LIBRARY)
    message(FATAL_ERROR "afd: utf8proc not found (utf8proc.h, libutf8proc): install libutf8proc-dev (scripts/setup.sh)")
endif()
if(NOT TARGET afd::pcre2)
    add_library(afd::pcre2 UNKNOWN IMPORTED)
    set_target_properties(afd::pcre2 PROPERTIES IMPORTED_LOCATION ${AFD_PCRE2_LIBRARY}
                          INTERFACE_INCLUDE_DIRECTORIES ${AFD_PCRE2_INCLUDE_DIR}
                          INTERFACE_COMPILE_DEFINITIONS PCRE2_CODE_UNIT_WIDTH=8)
    add_library(afd::utf8proc UNKNOWN IMPORTED)
    set_target_properties(afd::utf8proc PROPERTIES IMPORTED_LOCATION ${AFD_UTF8PROC_LIBRARY}
                          INTERFACE_INCLUDE_DIRECTORIES ${AFD_UTF8PROC_INCLUDE_DIR})
endif()
