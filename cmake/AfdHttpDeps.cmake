# cpp-httplib from Debian (libcpp-httplib-dev, scripts/setup.sh), the HTTP library of the http layer (src/http/).
# Debian ships it compiled: libcpp-httplib.so, built with OpenSSL, zlib and Brotli support, and an httplib.h of
# declarations only. CPPHTTPLIB_OPENSSL_SUPPORT changes the layout of the library's classes (Request, ClientImpl),
# so every file that includes httplib.h must define it as the library was built, and needs OpenSSL's headers
# (libssl-dev). The zlib and Brotli switches only declare compressor classes the layer does not use: they stay off,
# and their headers are not needed. Only src/http/ includes httplib.h (http_client.cpp, httplib_adapters.h).
#
# Found by find_path / find_library so that CMAKE_PREFIX_PATH finds an unpacked copy too (scripts/stage_gpu_deps.sh).
# Defines the imported target afd::httplib, and for builds outside CMake's targets (fuzz/targets.cmake)
# AFD_HTTPLIB_LIBRARY, AFD_HTTPLIB_INCLUDE_DIRS and AFD_HTTPLIB_DEFINES.
find_path(AFD_HTTPLIB_INCLUDE_DIR httplib.h)
find_library(AFD_HTTPLIB_LIBRARY NAMES cpp-httplib)
find_path(AFD_OPENSSL_INCLUDE_DIR openssl/ssl.h)
# Debian keeps this one under include/<multiarch>/ (find_path looks there too).
find_path(AFD_OPENSSL_ARCH_INCLUDE_DIR openssl/configuration.h)
if(NOT AFD_HTTPLIB_INCLUDE_DIR OR NOT AFD_HTTPLIB_LIBRARY)
    message(FATAL_ERROR "afd: cpp-httplib not found (httplib.h, libcpp-httplib): install libcpp-httplib-dev "
                        "(scripts/setup.sh)")
endif()
if(NOT AFD_OPENSSL_INCLUDE_DIR OR NOT AFD_OPENSSL_ARCH_INCLUDE_DIR)
    message(FATAL_ERROR "afd: OpenSSL's headers not found (openssl/ssl.h, openssl/configuration.h), which httplib.h "
                        "includes: install libssl-dev (scripts/setup.sh)")
endif()
file(STRINGS ${AFD_HTTPLIB_INCLUDE_DIR}/httplib.h afd_httplib_version_line REGEX "^#define CPPHTTPLIB_VERSION ")
string(REGEX MATCH "[0-9]+\\.[0-9]+\\.[0-9]+" AFD_HTTPLIB_VERSION "${afd_httplib_version_line}")
# The server hooks into Server::process_and_close_socket and process_request (src/http/http_server.cpp), as
# cpp-httplib's own SSLServer does; they are checked against 0.11.
if(NOT AFD_HTTPLIB_VERSION MATCHES "^0\\.11\\.")
    message(WARNING "afd: cpp-httplib ${AFD_HTTPLIB_VERSION} found; the http layer was written against 0.11 "
                    "(Debian 12)")
endif()
message(STATUS "afd: cpp-httplib ${AFD_HTTPLIB_VERSION} (${AFD_HTTPLIB_LIBRARY})")

set(AFD_HTTPLIB_INCLUDE_DIRS ${AFD_HTTPLIB_INCLUDE_DIR} ${AFD_OPENSSL_INCLUDE_DIR} ${AFD_OPENSSL_ARCH_INCLUDE_DIR})
list(REMOVE_DUPLICATES AFD_HTTPLIB_INCLUDE_DIRS)
set(AFD_HTTPLIB_DEFINES CPPHTTPLIB_OPENSSL_SUPPORT)
if(NOT TARGET afd::httplib)
    get_filename_component(afd_httplib_library_dir ${AFD_HTTPLIB_LIBRARY} DIRECTORY)
    add_library(afd::httplib UNKNOWN IMPORTED)
    # -rpath-link: the linker finds the library's own dependencies (OpenSSL, zlib, Brotli) beside it in an unpacked
    # copy as well.
    set_target_properties(afd::httplib PROPERTIES IMPORTED_LOCATION ${AFD_HTTPLIB_LIBRARY}
                          INTERFACE_INCLUDE_DIRECTORIES "${AFD_HTTPLIB_INCLUDE_DIRS}"
                          INTERFACE_COMPILE_DEFINITIONS "${AFD_HTTPLIB_DEFINES}"
                          INTERFACE_LINK_OPTIONS "LINKER:-rpath-link,${afd_httplib_library_dir}")
endif()
