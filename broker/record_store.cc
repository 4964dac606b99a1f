// See record_store.h.
#include "broker/record_store.h"

#include <fcntl.h>
#include <unistd.h>

#include <capnp/serialize.h>
#include <kj/exception.h>

#include "common/status.h"

namespace paseo {

absl::Status WriteRecordAtomically(const std::string& dir, const std::string& name,
                                   records::BrokerSandbox::Reader record) {
  std::string tmp = dir + "/." + name + ".tmp";
  std::string final_path = dir + "/" + name;
  int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return ErrnoStatus("create", tmp);
  capnp::MallocMessageBuilder message;
  message.setRoot(record);
  auto error = kj::runCatchingExceptions([&] { capnp::writeMessageToFd(fd, message); });
  if (error != nullptr || fsync(fd) != 0) {
    close(fd);
    unlink(tmp.c_str());
    return absl::InternalError("cannot write " + tmp);
  }
  close(fd);
  if (rename(tmp.c_str(), final_path.c_str()) != 0) return ErrnoStatus("rename", final_path);
  int dir_fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd < 0) return ErrnoStatus("open", dir);
  int rc = fsync(dir_fd);
  close(dir_fd);
  if (rc != 0) return ErrnoStatus("fsync", dir);
  return absl::OkStatus();
}

absl::Status ReadRecord(const std::string& dir, const std::string& name,
                        capnp::MallocMessageBuilder& message) {
  std::string path = dir + "/" + name;
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return ErrnoStatus("open", path);
  kj::AutoCloseFd owned(fd);
  auto error = kj::runCatchingExceptions([&] {
    capnp::ReaderOptions options;
    options.traversalLimitInWords = 8 << 20;  // 64 MiB: 4096 processes x 4 KiB argv fit
    capnp::StreamFdMessageReader reader(fd, options);
    message.setRoot(reader.getRoot<records::BrokerSandbox>());
  });
  if (error != nullptr) return absl::InvalidArgumentError(path + ": unreadable record");
  return absl::OkStatus();
}

}  // namespace paseo
