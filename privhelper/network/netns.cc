// See netns.h.
#include "privhelper/network/netns.h"

#include <fcntl.h>
#include <linux/nsfs.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <unistd.h>

#include <thread>

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace paseo::network {
namespace {

// Runs `work` on its own thread (which may change its namespaces freely: it ends with them).
absl::Status OnThread(const std::function<absl::Status()>& work) {
  absl::Status status;
  std::thread t([&] { status = work(); });
  t.join();
  return status;
}

absl::Status BindPin(const std::string& source, const std::string& pin) {
  int fd = open(pin.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return ErrnoStatus("create", pin);
  close(fd);
  if (mount(source.c_str(), pin.c_str(), nullptr, MS_BIND, nullptr) != 0) {
    absl::Status st = ErrnoStatus("pin netns", pin);
    unlink(pin.c_str());
    return st;
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status InNetns(int ns_fd, const std::function<absl::Status()>& work) {
  return OnThread([&]() -> absl::Status {
    if (setns(ns_fd, CLONE_NEWNET) != 0) return ErrnoStatus("setns", "CLONE_NEWNET");
    return work();
  });
}

absl::Status InNetnsFile(const std::string& pin, const std::function<absl::Status()>& work) {
  int fd = open(pin.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return ErrnoStatus("open", pin);
  absl::Status st = InNetns(fd, work);
  close(fd);
  return st;
}

absl::Status CreateNetns(const std::string& pin) {
  return OnThread([&]() -> absl::Status {
    if (unshare(CLONE_NEWNET) != 0) return ErrnoStatus("unshare", "CLONE_NEWNET");
    return BindPin("/proc/thread-self/ns/net", pin);
  });
}

absl::Status PinNetnsOf(pid_t pid, const std::string& pin) {
  if (IsNetns(pin)) return absl::OkStatus();
  unlink(pin.c_str());  // the empty file a previous privhelper's mount stood on
  return BindPin(absl::StrCat("/proc/", pid, "/ns/net"), pin);
}

absl::Status RemoveNetns(const std::string& pin) {
  // Not mounted here (a pin of a previous privhelper's mount namespace) is fine: unlink then
  // detaches whatever other namespaces still mount on it.
  if (umount2(pin.c_str(), MNT_DETACH | UMOUNT_NOFOLLOW) != 0 && errno != EINVAL &&
      errno != ENOENT)
    return ErrnoStatus("umount", pin);
  if (unlink(pin.c_str()) != 0 && errno != ENOENT) return ErrnoStatus("unlink", pin);
  return absl::OkStatus();
}

bool IsNetns(const std::string& path) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return false;
  int type = ioctl(fd, NS_GET_NSTYPE);
  close(fd);
  return type == CLONE_NEWNET;
}

absl::Status WriteNetSysctl(const std::string& name, const std::string& value) {
  std::string path = "/proc/sys/" + name;
  int fd = open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus("open", path);
  ssize_t n = write(fd, value.data(), value.size());
  close(fd);
  if (n != static_cast<ssize_t>(value.size())) return ErrnoStatus("write", path);
  return absl::OkStatus();
}

}  // namespace paseo::network
