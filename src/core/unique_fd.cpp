#include "core/unique_fd.h"

#include <unistd.h>

namespace afd::core {

void UniqueFd::reset(int fd) {
    if (fd_ >= 0) ::close(fd_);  // NOTE: close errors are not actionable here (the fd is gone either way).
    fd_ = fd;
}

}  // namespace afd::core
