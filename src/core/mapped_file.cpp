#include "core/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>

#include "core/unique_fd.h"

namespace afd::core {

Result<std::shared_ptr<MappedFile>> MappedFile::open(const std::string& path) {
    UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd.valid()) return ioError("cannot open {}: {}", path, std::strerror(errno));
    struct stat st {};
    if (::fstat(fd.get(), &st) != 0) return ioError("cannot stat {}: {}", path, std::strerror(errno));
    if (!S_ISREG(st.st_mode)) return ioError("{} is not a regular file", path);
    const size_t size = static_cast<size_t>(st.st_size);
    if (size == 0) return std::shared_ptr<MappedFile>(new MappedFile(path, nullptr, 0));
    void* addr = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd.get(), 0);
    if (addr == MAP_FAILED) return ioError("cannot mmap {} ({} bytes): {}", path, size, std::strerror(errno));
    return std::shared_ptr<MappedFile>(new MappedFile(path, static_cast<const uint8_t*>(addr), size));
}

MappedFile::~MappedFile() {
    if (data_ != nullptr) ::munmap(const_cast<uint8_t*>(data_), size_);
}

}  // namespace afd::core
