// See messages.h.
#include "client/messages.h"

#include <unistd.h>

#include <cerrno>

namespace paseo::client {

void WriteAll(int fd, const void* data, size_t size) {
  const char* bytes = static_cast<const char*>(data);
  for (size_t off = 0; off < size;) {
    ssize_t n = ::write(fd, bytes + off, size - off);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN) {
        usleep(1000);
        continue;
      }
      return;  // our output is gone; keep going so the process is not blocked by us
    }
    off += static_cast<size_t>(n);
  }
}

Messages::Messages(int fd) : fd_(fd), terminal_(isatty(fd) == 1) {}

Messages::Messages(kj::AutoCloseFd file)
    : owned_(kj::mv(file)), fd_(owned_.get()), terminal_(isatty(fd_) == 1) {}

void Messages::Say(const std::string& text) {
  if (silenced_) return;
  std::string line = raw_terminal_ ? "\r\npaseo-sandbox: " + text + "\r\n"
                                   : "paseo-sandbox: " + text + "\n";
  WriteAll(fd_, line.data(), line.size());
}

void Messages::StreamWritesTo(int fd) {
  if (fd == fd_ && !terminal_) silenced_ = true;
}

}  // namespace paseo::client
