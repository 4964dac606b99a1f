// paseo-sandbox-privhelper: the root half of the service. Loads and validates the root-owned
// config, verifies the pinned runsc, creates the client socket, starts the broker as the
// unprivileged user with no capabilities, moves itself into a private control network
// namespace for every runsc call, and serves the broker's closed set of requests.
#include <fcntl.h>
#include <sys/fsuid.h>
#include <grp.h>
#include <net/if.h>
#include <pwd.h>
#include <sched.h>
#include <signal.h>
#include <sys/capability.h>
#include <systemd/sd-daemon.h>
#include <sys/ioctl.h>
#include <linux/keyctl.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/mount.h>
#include <sys/syscall.h>
#include <sys/socket.h>
#include <dirent.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <chrono>
#include <optional>
#include <algorithm>
#include <cstring>
#include <vector>
#include <string>

#include <capnp/rpc-twoparty.h>
#include <kj/async-io.h>
#include <kj/async-unix.h>
#include <kj/main.h>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/spawn.h"
#include "common/status.h"
#include "privhelper/capabilities.h"
#include "privhelper/config.h"
#include "privhelper/helper_server.h"
#include "privhelper/netns_connect.h"
#include "privhelper/network/dns_resolver.h"
#include "privhelper/network/dns_upstreams.h"
#include "privhelper/network/firewall_rules.h"
#include "privhelper/network/netns.h"
#include "privhelper/network/sandbox_networks.h"
#include "privhelper/pidfd_watch.h"
#include "privhelper/runsc.h"
#include "privhelper/runsc_pin.h"
#include "privhelper/runsc_probe.h"
#include "privhelper/runsc_platform.h"
#include "privhelper/sandbox_host.h"
#include "privhelper/egress_link.h"
#include "privhelper/service_cgroup.h"

namespace paseo {
namespace {

void Log(const std::string& message) {
  std::fprintf(stderr, "paseo-sandbox-privhelper: %s\n", message.c_str());
}

// Copies the verified shim (from its open fd) to <runDir>/paseo-sandbox-shim, root:root
// 0555, and returns that path. runsc's gofer opens mount sources by path as root: the copy is
// a file only root can change, whatever happens later at the installed path.
absl::StatusOr<std::string> InstallShimCopy(int shim_fd, const std::string& run_dir) {
  std::string path = run_dir + "/paseo-sandbox-shim";
  std::string tmp = path + ".new";
  unlink(tmp.c_str());
  kj::AutoCloseFd out(open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0555));
  if (out.get() < 0) return ErrnoStatus("create", tmp);
  char buf[65536];
  off_t off = 0;
  for (;;) {
    ssize_t n = pread(shim_fd, buf, sizeof(buf), off);
    if (n < 0) return ErrnoStatus("read", "the sandbox shim");
    if (n == 0) break;
    for (ssize_t done = 0; done < n;) {
      ssize_t w = write(out.get(), buf + done, static_cast<size_t>(n - done));
      if (w < 0) return ErrnoStatus("write", tmp);
      done += w;
    }
    off += n;
  }
  if (fchown(out.get(), 0, 0) != 0 || fchmod(out.get(), 0555) != 0 || fsync(out.get()) != 0)
    return ErrnoStatus("finish", tmp);
  if (rename(tmp.c_str(), path.c_str()) != 0) return ErrnoStatus("rename", tmp);
  return path;
}

// Gives the open directory `fd` its owner and mode. The mode is set as the directory's owner:
// changing the mode of a directory the broker user owns would otherwise need CAP_FOWNER, which
// the unit's CapabilityBoundingSet (the serving set, capabilities.cc) leaves out.
absl::Status SetOwnerAndMode(int fd, const std::string& path, uid_t uid, gid_t gid, mode_t mode) {
  struct stat st;
  if (fstat(fd, &st) != 0) return ErrnoStatus("fstat", path);
  if ((st.st_mode & 07777) != mode) {
    // As its owner (the filesystem uid, with CAP_SETUID), not by handing it to root and back:
    // a kill between the two would leave the broker's directory root's.
    const uid_t owner = st.st_uid;
    const int previous = setfsuid(owner);
    if (static_cast<uid_t>(setfsuid(static_cast<uid_t>(-1))) != owner) {
      setfsuid(previous);
      return absl::PermissionDeniedError("setfsuid: cannot act as the owner of " + path);
    }
    const int rc = fchmod(fd, mode);
    const int err = errno;
    setfsuid(previous);
    if (rc != 0) {
      errno = err;
      return ErrnoStatus("fchmod", path);
    }
  }
  if (fchown(fd, uid, gid) != 0) return ErrnoStatus("fchown", path);
  return absl::OkStatus();
}

absl::Status MakeDir(const std::string& path, mode_t mode, uid_t uid, gid_t gid) {
  if (mkdir(path.c_str(), mode) != 0 && errno != EEXIST) return ErrnoStatus("mkdir", path);
  int fd = open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return absl::FailedPreconditionError(path + " is not a directory");
  absl::Status set = SetOwnerAndMode(fd, path, uid, gid, mode);
  close(fd);
  return set;
}

// The audit log's directory (HelperConfig.audit.path's): the broker's own, so it can create and
// rotate its files there without any privilege. Made here 0700 and handed to the broker user; an
// existing directory must already be the broker's -- a directory someone else owns (/var/log,
// /etc) is never handed over, and a symlink is refused (O_NOFOLLOW).
absl::Status MakeAuditDir(const std::string& file_path, uid_t uid, gid_t gid) {
  std::string dir = file_path.substr(0, file_path.rfind('/'));
  // Walked from / one component at a time without following symlinks, each ancestor root-owned
  // and writable by nobody else (or sticky, like /tmp, where others cannot replace root's
  // entries): a symlink planted above the directory (say by a broker that can write one of its
  // ancestors) can never make root create, chown or chmod a directory elsewhere.
  int parent = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (parent < 0) return ErrnoStatus("open", "/");
  absl::Cleanup close_parent = [&parent] { close(parent); };
  std::vector<std::string> parts = absl::StrSplit(dir.substr(1), '/');
  std::string walked;
  for (size_t i = 0; i < parts.size(); ++i) {
    struct stat st;
    if (fstat(parent, &st) != 0) return ErrnoStatus("fstat", walked.empty() ? "/" : walked);
    if (st.st_uid != 0 || ((st.st_mode & 022) != 0 && (st.st_mode & S_ISVTX) == 0))
      return absl::FailedPreconditionError(absl::StrCat(
          "audit.path: ", walked.empty() ? "/" : walked,
          " must be owned by root and writable by nobody else (it lies above the audit directory)"));
    walked += "/" + parts[i];
    bool last = i + 1 == parts.size();
    bool created = false;
    if (last) {
      created = mkdirat(parent, parts[i].c_str(), 0700) == 0;
      if (!created && errno != EEXIST) return ErrnoStatus("mkdir", walked);
    }
    int next = openat(parent, parts[i].c_str(),
                      (last ? O_RDONLY : O_PATH) | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (next < 0) return ErrnoStatus("open (a directory, not a symlink)", walked);
    close(parent);
    parent = next;
    if (!last) continue;
    if (fstat(parent, &st) != 0) return ErrnoStatus("fstat", dir);
    if (!created && st.st_uid != uid) {
      return absl::FailedPreconditionError(absl::StrCat(
          "audit.path: ", dir, " exists and is not owned by the broker user; name a directory "
          "of its own (the privhelper creates it)"));
    }
    absl::Status set = SetOwnerAndMode(parent, dir, uid, gid, 0700);
    if (!set.ok()) return set;
  }
  return absl::OkStatus();
}

// The listen backlog: the system's maximum (net.core.somaxconn, 4096 by default since Linux
// 5.4). A pending Unix-socket connect beyond the backlog fails with EAGAIN for a non-blocking
// client instead of waiting, so with the old 128 a burst of 300 clients (Paseo's daemon
// connecting for many agents at once) saw errors while the broker was busy or restarting.
int ListenBacklog() {
  int value = 0;
  if (FILE* f = std::fopen("/proc/sys/net/core/somaxconn", "re")) {
    if (std::fscanf(f, "%d", &value) != 1) value = 0;
    std::fclose(f);
  }
  return value > 0 ? value : SOMAXCONN;
}

// The client socket: pathname only, root:<socketGroup> 0660. The mode is set explicitly after
// bind (a new socket's mode follows the umask) and bind happens under a 0177 umask so there is
// no window in which it is more open.
absl::StatusOr<int> ListenOnSocket(const std::string& path, gid_t group, mode_t mode = 0660) {
  sockaddr_un addr = {};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof(addr.sun_path))
    return absl::InvalidArgumentError(path + ": socket path too long");
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return ErrnoStatus("socket", path);
  struct stat st;
  if (lstat(path.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode)) {
      close(fd);
      return absl::FailedPreconditionError(path + " exists and is not a socket");
    }
    unlink(path.c_str());
  }
  mode_t old = umask(0177);
  int rc = bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  umask(old);
  if (rc != 0) {
    absl::Status s = ErrnoStatus("bind", path);
    close(fd);
    return s;
  }
  if (chown(path.c_str(), 0, group) != 0 || chmod(path.c_str(), mode) != 0 ||
      listen(fd, ListenBacklog()) != 0) {
    absl::Status s = ErrnoStatus("chown/chmod/listen", path);
    close(fd);
    return s;
  }
  return fd;
}

// The client socket from systemd socket activation (installer/systemd/paseo-sandbox.socket:
// LISTEN_FDS=1), or -1 if none was passed. systemd keeps it open across restarts of the
// service, so the socket file stays the same inode: a client holding it by a bind mount of the
// file (Paseo's Docker container, docker/README.md) keeps reaching the service. It must be what
// this privhelper would have made: a listening stream socket bound to `path`, root:<group> 0660.
absl::StatusOr<int> InheritedListener(const std::string& path, gid_t group) {
  int n = sd_listen_fds(1);  // unsets LISTEN_*: the broker and runsc never see them
  if (n < 0) return ErrnoStatus("sd_listen_fds", path);
  if (n == 0) return -1;
  if (n != 1)
    return absl::FailedPreconditionError(
        absl::StrCat("systemd passed ", n, " sockets; expected one, listening on ", path));
  const int fd = SD_LISTEN_FDS_START;
  if (sd_is_socket_unix(fd, SOCK_STREAM, 1, path.c_str(), 0) <= 0)
    return absl::FailedPreconditionError(
        "the socket systemd passed is not a listening stream socket bound to " + path +
        " (ListenStream= in paseo-sandbox.socket must name it)");
  struct stat st;
  if (lstat(path.c_str(), &st) != 0) return ErrnoStatus("lstat", path);
  if (!S_ISSOCK(st.st_mode) || st.st_uid != 0 || st.st_gid != group ||
      (st.st_mode & 07777) != 0660)
    return absl::FailedPreconditionError(absl::StrCat(
        path, ": the socket systemd made must be root:", group,
        " 0660 (SocketUser=root, SocketGroup=<socketGroup>, SocketMode=0660)"));
  if (fcntl(fd, F_SETFD, FD_CLOEXEC) != 0) return ErrnoStatus("fcntl(FD_CLOEXEC)", path);
  return fd;
}

// Runs in the forked broker child before exec: its own empty network namespace (it needs no
// network, and must never share the control netns where runsc's control sockets live), the
// bounding and ambient sets emptied while still root, then the broker user's ids (which
// clears the permitted and effective sets), an explicitly empty capability state, and
// no_new_privs so nothing it execs can gain any.
int BecomeBroker(uid_t uid, gid_t gid) {
  if (unshare(CLONE_NEWNET) != 0) return errno;
  return BecomeUnprivileged(uid, gid);
}

// The egress proxy, started as helper.json's network.egressUser; null (logged) if it cannot be.
std::unique_ptr<EgressLink> StartEgress(const Config& config, const std::string& self_path,
                                        kj::UnixEventPort& events, kj::LowLevelAsyncIoProvider& io,
                                        kj::Timer& timer, int host_net, int host_mounts,
                                        network::Firewall& firewall,
                                        const std::vector<network::DnsUpstream>& dns_upstreams,
                                        uid_t broker_uid, gid_t socket_gid) {
  auto net = config.helper().getNetwork();
  // Copied at once: getpwnam's answer is static storage that any later passwd lookup (getpwent,
  // getpwuid, in this process or a library) overwrites. Kept as a pointer, the proxy once ran
  // as whichever user a later lookup last read -- /etc/passwd's last entry, not the user the
  // firewall restricts -- as soon as a package added a user after ours.
  passwd* found = getpwnam(net.getEgressUser().cStr());
  std::optional<passwd> user;
  if (found != nullptr) user = *found;
  const passwd* pw = user ? &*user : nullptr;
  // Its own user, in no group that opens the API socket or the broker's files: a proxy a
  // sandbox took over gets nothing of the service's.
  if (pw == nullptr || pw->pw_uid == 0 || pw->pw_uid == broker_uid || pw->pw_gid == socket_gid) {
    Log(absl::StrCat("no egress proxy: user \"", net.getEgressUser().cStr(),
                     "\" does not exist, or is root, the broker's user or in the socket's group; "
                     "profiles with allowNames rules are refused"));
    return nullptr;
  }
  std::vector<std::string> upstreams;
  std::vector<network::Endpoint> endpoints;
  for (const auto& u : dns_upstreams) {
    upstreams.push_back(absl::StrCat(network::FormatIpv4(u.addr), ":", u.port));
    endpoints.push_back({u.addr, u.port});
  }
  // Before it runs: what it may connect to, in the kernel (the host's own addresses never).
  absl::Status restricted = firewall.RestrictEgressUser(pw->pw_uid, endpoints);
  if (!restricted.ok()) {
    Log(absl::StrCat("no egress proxy: cannot bound its connections: ", restricted.message(),
                     "; profiles with allowNames rules are refused"));
    return nullptr;
  }
  std::string pool = net.getPool().cStr();
  EgressLink::Options options;
  options.path = config.EgressBinary(self_path);
  auto fd = OpenRootOwnedExecutable(options.path);
  if (!fd.ok()) {
    Log(absl::StrCat("no egress proxy: ", fd.status().message(),
                     "; profiles with allowNames rules are refused"));
    return nullptr;
  }
  options.exec_fd = *fd;
  options.uid = pw->pw_uid;
  options.gid = pw->pw_gid;
  options.host_net_fd = host_net;
  options.host_mounts_fd = host_mounts;
  options.upstreams = std::move(upstreams);
  options.pool = pool;
  options.trusted_ca = net.getEgressTrustedCa().cStr();
  auto egress = std::make_unique<EgressLink>(events, io, timer, std::move(options));
  absl::Status started = egress->Start();
  if (!started.ok()) {
    Log(absl::StrCat("no egress proxy: ", started.message(),
                     "; profiles with allowNames rules are refused"));
    return nullptr;
  }
  return egress;
}

// Staging binds live in the privhelper's own mount namespace (a slave of the host's): they
// never propagate to the host or to other services, and vanish with the namespace.
absl::Status EnterPrivateMountNamespace() {
  if (unshare(CLONE_NEWNS) != 0) return ErrnoStatus("unshare", "CLONE_NEWNS");
  if (mount(nullptr, "/", nullptr, MS_REC | MS_SLAVE, nullptr) != 0)
    return ErrnoStatus("mount", "/ rslave");
  return absl::OkStatus();
}

// Joins the control netns pinned at `pin` by an earlier privhelper (sandboxes it started may
// still run there, and from any other netns runsc reports them stopped), or makes a fresh one
// with only loopback and pins it. runsc binds each sandbox's control socket as an abstract
// socket in the netns it runs in, and abstract sockets are scoped per netns. Must run in the
// host's mount namespace, so the pin outlives this process.
absl::Status EnterControlNetns(const std::string& pin) {
  int existing = open(pin.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (existing >= 0) {
    int rc = setns(existing, CLONE_NEWNET);
    close(existing);
    if (rc == 0) {
      Log("joined the pinned control network namespace " + pin);
      return absl::OkStatus();
    }
    unlink(pin.c_str());  // a stale file, not a namespace
  }
  if (unshare(CLONE_NEWNET) != 0) return ErrnoStatus("unshare", "CLONE_NEWNET");
  int file = open(pin.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (file < 0) return ErrnoStatus("create", pin);
  close(file);
  if (mount("/proc/self/ns/net", pin.c_str(), nullptr, MS_BIND, nullptr) != 0)
    return ErrnoStatus("pin netns", pin);
  int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (s < 0) return ErrnoStatus("socket", "AF_INET");
  ifreq ifr = {};
  std::strcpy(ifr.ifr_name, "lo");
  int rc = ioctl(s, SIOCGIFFLAGS, &ifr);
  if (rc == 0) {
    ifr.ifr_flags |= IFF_UP;
    rc = ioctl(s, SIOCSIFFLAGS, &ifr);
  }
  close(s);
  if (rc != 0) return ErrnoStatus("ioctl", "lo up");
  return absl::OkStatus();
}

// <runDir>/config-generation: "<generation> <outcome>\n", where outcome is "loaded" (at start),
// "applied" (a reload took effect and the broker serves the new policy) or "refused: <why>".
// `paseo-sandbox-admin` waits for the number to pass the one it saw before it signalled. Written
// whole (temporary file, rename) so a reader never sees half a line.
void WriteConfigGeneration(const std::string& path, uint64_t generation,
                           const std::string& outcome) {
  std::string tmp = path + ".new";
  std::string text = absl::StrCat(generation, " ", outcome, "\n");
  int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd < 0) {
    Log(absl::StrCat("cannot write ", tmp, ": ", std::strerror(errno)));
    return;
  }
  bool written = write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  close(fd);
  if (!written || rename(tmp.c_str(), path.c_str()) != 0)
    Log(absl::StrCat("cannot write ", path, ": ", std::strerror(errno)));
}

// Where the broker child finds the host mount namespace fd before it execs (then closed).
constexpr int kHostMountsFd = 5;
// The operator socket, in the broker (its --operator-fd).
constexpr int kOperatorFd = 6;

// What the command line chose (PrivhelperMain parses it).
struct Options {
  std::string config_dir = "/etc/paseo-sandbox";
  bool check_only = false;
  std::vector<std::string> without;  // capabilities to drop too: only ever weakens the privhelper
};

// Loads the config and, unless only checking it, runs the service until SIGTERM/SIGINT.
// `program` is argv[0]. Returns the exit code; every error is logged before.
int Serve(const Options& options, const std::string& program) {
  const std::string& config_dir = options.config_dir;
  const bool check_only = options.check_only;
  const std::vector<std::string>& without = options.without;
  auto config = LoadConfig(config_dir);
  if (!config.ok()) {
    Log(absl::StrCat("configuration error: ", config.status().message()));
    return 1;
  }
  absl::Status owned = CheckConfigOwnership(config_dir);
  if (!owned.ok() && !check_only) {
    Log(absl::StrCat("configuration error: ", owned.message()));
    return 1;
  }
  if (check_only) {
    if (!owned.ok()) std::printf("warning: %s\n", std::string(owned.message()).c_str());
    std::printf("configuration OK: %zu deployment(s), %zu profile(s)\n",
                (*config)->deployments().size(), (*config)->profiles().size());
    return 0;
  }
  if (geteuid() != 0) {
    Log("must run as root");
    return 1;
  }
  // From here on a stop signal waits (blocked) until serving starts and is then handled as
  // one: a systemctl stop during the start-up's runsc probe is not the default action's death.
  kj::UnixEventPort::captureSignal(SIGTERM);
  kj::UnixEventPort::captureSignal(SIGINT);
  kj::UnixEventPort::captureSignal(SIGUSR2);  // the unit's KillSignal: stop per onRestart
  kj::UnixEventPort::captureSignal(SIGHUP);
  const auto helper = (*config)->helper();
  auto runsc_fd = OpenPinnedRunsc(helper.getRunsc());
  if (!runsc_fd.ok()) {
    Log(std::string(runsc_fd.status().message()));
    return 1;
  }
  // What the pinned runsc has, from its own flag help: its platforms (the one to use is what
  // helper.json asks for among them), and whether it has -directfs to turn off.
  const RunscFlagsInfo runsc_flags = ReadRunscFlags(*runsc_fd);
  absl::StatusOr<PlatformChoice> platform =
      ChoosePlatformFromProbe(helper.getRunsc().getPlatform().cStr(), runsc_flags.platforms);
  if (!platform.ok()) {
    Log(std::string(platform.status().message()));
    return 1;
  }
  passwd* broker_pw = getpwnam(helper.getBrokerUser().cStr());
  group* socket_gr = getgrnam(helper.getSocketGroup().cStr());
  if (broker_pw == nullptr || socket_gr == nullptr || broker_pw->pw_uid == 0 ||
      broker_pw->pw_gid == 0) {
    Log(absl::StrCat("broker user \"", helper.getBrokerUser().cStr(), "\" or socket group \"",
                     helper.getSocketGroup().cStr(), "\" does not exist (or has uid or gid 0)"));
    return 1;
  }
  uid_t broker_uid = broker_pw->pw_uid;
  gid_t broker_gid = broker_pw->pw_gid;
  gid_t socket_gid = socket_gr->gr_gid;

  std::string run_dir = helper.getRunDir().cStr();
  std::string state_dir = helper.getStateDir().cStr();
  for (auto [dir, mode] : {std::pair{run_dir, 0755}, {run_dir + "/runsc", 0700},
                           {state_dir, 0755}, {state_dir + "/bundles", 0700}}) {
    absl::Status st = MakeDir(dir, mode, 0, 0);
    if (!st.ok()) {
      Log(std::string(st.message()));
      return 1;
    }
  }
  // "auto" with both systrap and ptrace: the one measured faster on this host, from the record
  // in the state dir or measured now (once per runsc, kernel and CPU; runsc_probe.h).
  if (!platform->measure.empty()) {
    absl::StatusOr<std::string> runsc_sha = Sha256OfFd(*runsc_fd, helper.getRunsc().getPath().cStr());
    if (!runsc_sha.ok()) {
      Log(std::string(runsc_sha.status().message()));
      return 1;
    }
    const std::string record = state_dir + "/runsc-probe";
    RunscProbe probe = ProbeRunscOnHost(*runsc_fd, *runsc_sha, platform->measure, record, run_dir,
                                        runsc_flags.FixedFlags());
    if (!probe.platform.empty()) {
      platform->platform = probe.platform;
      platform->why = DescribeMeasuredPlatform(probe, record);
    } else {
      platform->why += "; measuring systrap against ptrace failed (runsc's default is used)";
    }
  }
  Log("runsc platform: " + platform->why);
  Log(runsc_flags.has_directfs_flag ? "runsc directfs: off (--directfs=false; the pinned runsc defaults it on)"
                        : "runsc directfs: the pinned runsc has none");
  // The broker's own state (its output logs): the one place it may write.
  absl::Status broker_dir = MakeDir(state_dir + "/broker", 0700, broker_uid, broker_gid);
  if (!broker_dir.ok()) {
    Log(std::string(broker_dir.message()));
    return 1;
  }
  if (helper.getAudit().getDestination() == config::AuditDestination::FILE) {
    absl::Status audit_dir = MakeAuditDir((*config)->AuditPath(), broker_uid, broker_gid);
    if (!audit_dir.ok()) {
      Log(std::string(audit_dir.message()));
      return 1;
    }
  }
  std::string socket_path = run_dir + "/supervisor.sock";
  auto inherited = InheritedListener(socket_path, socket_gid);
  if (!inherited.ok()) {
    Log(std::string(inherited.status().message()));
    return 1;
  }
  // A socket systemd holds is systemd's: never unlinked here (its file must outlive us).
  const bool socket_activated = *inherited >= 0;
  auto listen_fd = socket_activated ? absl::StatusOr<int>(*inherited)
                                    : ListenOnSocket(socket_path, socket_gid);
  if (!listen_fd.ok()) {
    Log(std::string(listen_fd.status().message()));
    return 1;
  }
  if (socket_activated) Log("serving the socket systemd passed: " + socket_path);
  // The operator's socket (schema/operator.capnp, `paseo-sandbox-admin metrics`): root's alone,
  // made anew at each start, never systemd's. Without it the service still serves its clients.
  std::string operator_path = run_dir + "/operator.sock";
  auto operator_fd = ListenOnSocket(operator_path, 0, 0600);
  if (!operator_fd.ok()) Log(absl::StrCat("no operator socket: ", operator_fd.status().message()));
  // Until serving starts, a failure removes the socket it made (see the Cancel below).
  absl::Cleanup remove_socket = [&socket_path, socket_activated] {
    if (!socket_activated) unlink(socket_path.c_str());
  };
  absl::Cleanup remove_operator_socket = [&operator_path, &operator_fd] {
    if (operator_fd.ok()) unlink(operator_path.c_str());
  };
  // Each process costs the broker three fds and each client one: use the hard limit.
  struct rlimit nofile;
  if (getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur < nofile.rlim_max) {
    nofile.rlim_cur = nofile.rlim_max;
    setrlimit(RLIMIT_NOFILE, &nofile);
  }
  // It reads and keeps registered secrets (decision 59): no core file of it (fs.suid_dumpable
  // 0, Debian's default). Not RLIMIT_CORE, which what it starts would inherit; what it starts
  // is dumpable again after its execve.
  prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);

  kj::UnixEventPort::captureChildExit();
  signal(SIGPIPE, SIG_IGN);
  auto io = kj::setupAsyncIo();
  auto& events = io.unixEventPort;

  // Companion binaries live beside this one unless the config names them.
  std::string self_path = program;
  if (self_path.empty() || self_path[0] != '/') {
    char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    self[n > 0 ? n : 0] = '\0';
    self_path = self;
  }
  // The shim is bind-mounted into sandboxes: it must be root's and nobody else's to change,
  // and what is mounted is a private copy of the file checked here.
  std::string shim_installed = (*config)->SandboxShimBinary(self_path);
  auto shim_fd = OpenRootOwnedExecutable(shim_installed);
  absl::StatusOr<std::string> shim_copy =
      shim_fd.ok() ? InstallShimCopy(*shim_fd, run_dir) : shim_fd.status();
  if (shim_fd.ok()) close(*shim_fd);
  if (!shim_copy.ok()) {
    Log(absl::StrCat("cannot use the sandbox shim: ", shim_copy.status().message()));
    return 1;
  }
  std::string shim = *shim_copy;

  SpawnRequest broker;
  broker.path = (*config)->BrokerBinary(self_path);
  // The broker binary, the listening socket and /dev/null stay open for restarts.
  auto broker_fd = OpenRootOwnedExecutable(broker.path);
  if (!broker_fd.ok()) {
    Log(absl::StrCat("cannot start broker: ", broker_fd.status().message()));
    return 1;
  }
  broker.exec_fd = *broker_fd;
  broker.argv = {broker.path, "--helper-fd=3", "--listen-fd=4",
                 absl::StrCat("--log-dir=", state_dir, "/broker")};
  if (operator_fd.ok()) broker.argv.push_back("--operator-fd=6");
  broker.env = {"PATH=/usr/bin:/bin", "LC_ALL=C"};
  int dev_null = open("/dev/null", O_RDONLY | O_CLOEXEC);
  // The host's mount namespace: the pin lives there, and a restarted broker is put back there
  // so it never sees (or keeps alive) the privhelper's staging mounts.
  int host_mounts = open("/proc/self/ns/mnt", O_RDONLY | O_CLOEXEC);
  broker.in_child = [broker_uid, broker_gid] {
    if (setns(kHostMountsFd, CLONE_NEWNS) != 0) return errno;
    close(kHostMountsFd);
    return BecomeBroker(broker_uid, broker_gid);
  };
  // Starts a broker on a fresh socketpair; returns its pid and our end.
  auto spawn_broker = [&]() -> absl::StatusOr<std::pair<pid_t, int>> {
    int pair[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0)
      return ErrnoStatus("socketpair", "");
    // stdin: nothing; stdout/stderr: the privhelper's log streams, shared on purpose.
    broker.fds = {{0, dev_null},  {1, STDOUT_FILENO}, {2, STDERR_FILENO},
                  {3, pair[1]},  {4, *listen_fd},    {kHostMountsFd, host_mounts}};
    if (operator_fd.ok()) broker.fds.push_back({kOperatorFd, *operator_fd});
    auto pid = Spawn(broker);
    close(pair[1]);
    if (!pid.ok()) {
      close(pair[0]);
      return pid.status();
    }
    return std::make_pair(*pid, pair[0]);
  };
  auto first = spawn_broker();
  if (!first.ok()) {
    Log(absl::StrCat("cannot start broker: ", first.status().message()));
    return 1;
  }
  pid_t pid = first->first;
  absl::Cleanup kill_broker = [pid] { kill(pid, SIGKILL); };
  // Watch it right away: kj reaps only children it was told about, so an exit before the
  // watch would never be seen (regression: a broker killed during start-up was never restarted).
  auto first_exit = WatchChild(events, pid);

  // The host's network namespace, where sandbox links, their firewall and NAT live: kept open
  // (the privhelper itself serves from its control namespace) for SandboxNetworks.
  int host_net = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
  if (host_net < 0) {
    Log("cannot open the host network namespace");
    return 1;
  }
  std::string netns_pin = run_dir + "/control-netns";
  absl::Status netns = EnterControlNetns(netns_pin);
  if (netns.ok()) netns = EnterPrivateMountNamespace();
  if (!netns.ok()) {
    Log(std::string(netns.message()));
    return 1;
  }

  // The bounds on all sandboxes together, before any sandbox is adopted or made: without them
  // nothing stops the sandboxes from taking the host together, so the service does not start.
  auto service_cgroup = ServiceCgroup::Open("/sys/fs/cgroup", helper.getCgroupParent().cStr());
  absl::Status bounded =
      service_cgroup.ok() ? service_cgroup->Apply((*config)->service()) : service_cgroup.status();
  if (!bounded.ok() && (!service_cgroup.ok() || !service_cgroup->HoldsSandboxes())) {
    Log(absl::StrCat("cannot bound all sandboxes together on their cgroup ",
                     helper.getCgroupParent().cStr(), ": ", bounded.message()));
    return 1;
  }
  // Sandboxes a previous instance left (adopted or destroyed below) may hold more than a lowered
  // bound lets the kernel write now (v1 refuses a parent's CPU quota below a child's, a memory
  // limit below what it cannot reclaim): the bounds that could be written apply, and creates
  // are still checked against the configured ones (CheckServiceRoom).
  if (!bounded.ok())
    Log(absl::StrCat("warning: the sandboxes left on cgroup ", helper.getCgroupParent().cStr(),
                     " keep part of the service's bounds from being written: ", bounded.message()));
  {
    const ServiceBounds& b = (*config)->service();
    Log(absl::StrCat("all sandboxes together: at most ", b.memory_bytes >> 20, " MiB, ",
                     b.cpu_millis, " CPU millis, ", b.max_host_tasks, " host tasks (cgroup ",
                     helper.getCgroupParent().cStr(), service_cgroup->unified() ? ", v2)" : ", v1)"));
  }

  std::vector<cap_value_t> keep;
  for (const auto& c : ServingCapabilities()) {
    if (std::find(without.begin(), without.end(), c.name) == without.end()) keep.push_back(c.cap);
  }
  absl::Status dropped = KeepOnlyCapabilities(keep);
  if (!dropped.ok()) {
    Log(std::string(dropped.message()));
    return 1;
  }
  // Serving from here: the shutdown below removes the socket itself, before it waits for the
  // broker and the sandboxes (a new privhelper may have bound the path by the time they end).
  std::move(kill_broker).Cancel();
  std::move(remove_socket).Cancel();
  std::move(remove_operator_socket).Cancel();

  RunscProcessRunner runsc(events, *runsc_fd,
                           {run_dir + "/runsc", platform->platform, false, runsc_flags.has_directfs_flag});
  PidfdWatcher watcher(events);
  // Sandbox.connect: each connection starts from a thread that joins the sandbox's netns.
  NetnsPortConnector ports(events, events.getTimer(), kConnectPatience, network::kInboundMark);
  SandboxHost host(**config, runsc, watcher, events.getTimer(), shim, "/sys/fs/cgroup", &ports);
  host.SetServiceCgroup(&*service_cgroup);
  if (helper.getSpawner()) host.EnableSpawners(*io.lowLevelProvider);
  // Network mode "sandbox": only if a profile uses it is anything changed on the host.
  std::unique_ptr<network::SandboxNetworks> networks;
  std::unique_ptr<network::DnsResolver> dns;  // destroyed before the firewall it feeds
  std::unique_ptr<EgressLink> egress;
  if ((*config)->UsesSandboxNetwork()) {
    auto pool = network::ParseCidr(helper.getNetwork().getPool().cStr());  // validated
    networks = std::make_unique<network::SandboxNetworks>(host_net, run_dir, *pool,
                                                          helper.getNetwork().getUplink().cStr());
    absl::Status started = networks->Start();
    if (started.ok()) {
      runsc.SetHideProcSysNet(networks->hide_proc_sys_net());
      host.SetNetworks(networks.get());
      std::vector<std::string> configured;
      for (auto u : helper.getNetwork().getDnsUpstreams()) configured.emplace_back(u.cStr());
      auto upstreams = network::LoadDnsUpstreams(configured);
      if (upstreams.ok()) {
        // Every resolver socket (listeners on the links' host ends, queries to the upstreams)
        // is made in the host's namespace; this thread stays in the control namespace.
        network::DnsResolverOptions dns_options;
        dns_options.make_socket = [ns = networks->host_ns_fd()](int type) {
          int fd = -1, err = 0;
          absl::Status made = network::InNetns(ns, [&] {
            fd = socket(AF_INET, type, 0);
            err = errno;
            return absl::OkStatus();
          });
          errno = made.ok() ? err : EPERM;
          return made.ok() ? fd : -1;
        };
        dns = std::make_unique<network::DnsResolver>(events, *io.lowLevelProvider, *upstreams,
                                                     networks->firewall(), dns_options);
        host.SetDns(dns.get());
        networks->set_serves_dns(true);
        // Names go through the egress proxy (decision 58): without it, profiles with allowNames
        // rules are refused rather than given their addresses.
        networks->set_egress_port(kEgressPort);
        egress = StartEgress(**config, self_path, events, *io.lowLevelProvider, events.getTimer(),
                             networks->host_ns_fd(), host_mounts, networks->firewall(), *upstreams,
                             broker_uid, socket_gid);
        if (egress) host.SetEgress(egress.get());
      } else {
        Log(absl::StrCat("no DNS upstream; creates with network mode \"sandbox\" are refused: ",
                         upstreams.status().message()));
      }
    } else {
      // Fail closed for those profiles only: their creates are refused (failed-precondition),
      // sandboxes without a network still work.
      Log(absl::StrCat("cannot set up sandbox networking; profiles with network mode "
                       "\"sandbox\" are refused: ", started.message()));
      networks = nullptr;
    }
  } else {
    close(host_net);
  }
  // Before the first request: adopt or destroy what a previous instance left, and collect
  // stale bundles and cgroups.
  kj::Maybe<kj::Exception> reconciled = kj::runCatchingExceptions(
      [&] { host.Reconcile(helper.getOnRestart()).wait(io.waitScope); });
  KJ_IF_MAYBE(e, reconciled) {
    Log(std::string("reconcile failed (continuing): ") + e->getDescription().cStr());
  }
  // One link per broker: its socketpair, the RPC network on it, and the helper server.
  struct BrokerLink {
    pid_t pid;
    kj::Own<kj::AsyncCapabilityStream> stream;
    kj::Own<capnp::TwoPartyVatNetwork> network;
    kj::Own<capnp::RpcSystem<capnp::rpc::twoparty::VatId>> rpc;
    kj::ForkedPromise<int> exit;
  };
  ServiceFacts facts;
  facts.started_at_unix_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                                 std::chrono::system_clock::now().time_since_epoch())
                                 .count();
  auto make_link = [&](pid_t broker_pid, int fd, kj::Promise<int> exit) {
    auto stream = io.lowLevelProvider->wrapUnixSocketFd(
        fd, kj::LowLevelAsyncIoProvider::TAKE_OWNERSHIP);
    // capnp 0.9.2 sends fds only on a network whose maxFdsPerMessage is non-zero (see
    // testing/fd_passing_test.cc). The broker's requests carry no capabilities, so any fd it
    // sent would be closed with its message.
    auto network = kj::heap<capnp::TwoPartyVatNetwork>(*stream, /*maxFdsPerMessage=*/3,
                                                       capnp::rpc::twoparty::Side::SERVER);
    auto rpc = kj::heap<capnp::RpcSystem<capnp::rpc::twoparty::VatId>>(
        capnp::makeRpcServer(*network, kj::heap<HelperServer>(**config, host, &facts)));
    return kj::heap<BrokerLink>(
        BrokerLink{broker_pid, kj::mv(stream), kj::mv(network), kj::mv(rpc), exit.fork()});
  };
  kj::Own<BrokerLink> link = make_link(pid, first->second, kj::mv(first_exit));
  Log(absl::StrCat("serving ", socket_path, " (broker pid ", pid, ")"));
  // systemd Type=notify: ready once the socket is served (a no-op outside systemd).
  sd_notify(0, absl::StrCat("READY=1\nSTATUS=serving ", socket_path).c_str());

  // A broker that dies is restarted with backoff (1 s doubling to 30 s, reset after a minute
  // of health). Its processes keep running and block on full pipes meanwhile; the new broker
  // takes them over from the kept fds (reattach) and continues their output logs.
  auto& timer = io.provider->getTimer();
  kj::Duration backoff = 1 * kj::SECONDS;
  kj::TimePoint started = timer.now();
  // A reload (SIGHUP) ends the broker on purpose so the next one fetches the new policy: that
  // restart is immediate and leaves the crash backoff alone, and it is what marks the reload
  // applied in <runDir>/config-generation.
  bool reload_restart = false;
  uint64_t generation = 1;
  std::string generation_file = run_dir + "/config-generation";
  kj::Function<kj::Promise<void>()> supervise;
  supervise = [&]() -> kj::Promise<void> {
    return link->exit.addBranch().then([&](int status) {
      bool reload = reload_restart;
      reload_restart = false;
      kj::Duration delay = 0 * kj::SECONDS;
      if (reload) {
        Log(absl::StrCat("broker ended for the reload (status ", status,
                         "); starting it with the new policy"));
      } else {
        Log(absl::StrCat("broker exited (status ", status, "); restarting in ",
                         backoff / kj::MILLISECONDS, " ms"));
        if (timer.now() - started > 60 * kj::SECONDS) backoff = 1 * kj::SECONDS;
        delay = backoff;
        backoff = std::min(backoff * 2, 30 * kj::SECONDS);
      }
      link = nullptr;
      return timer.afterDelay(delay).then([&, reload]() -> kj::Promise<void> {
        started = timer.now();
        auto next = spawn_broker();
        if (!next.ok()) {
          Log(absl::StrCat("cannot restart broker: ", next.status().message()));
          if (reload)
            WriteConfigGeneration(generation_file, generation,
                                  absl::StrCat("applied, but the broker did not start: ",
                                               next.status().message()));
          // Try again after the next backoff: a link whose "exit" is immediate.
          link = kj::heap<BrokerLink>(BrokerLink{0, kj::Own<kj::AsyncCapabilityStream>(),
                                                 kj::Own<capnp::TwoPartyVatNetwork>(),
                                                 kj::Own<capnp::RpcSystem<capnp::rpc::twoparty::VatId>>(),
                                                 kj::Promise<int>(-1).fork()});
          return supervise();
        }
        link = make_link(next->first, next->second, WatchChild(events, next->first));
        // Counted once the broker runs again: a spawn that failed and is retried is not one.
        ++(reload ? facts.broker_reloads : facts.broker_restarts);
        Log(absl::StrCat("broker restarted (pid ", next->first, ")"));
        if (reload) WriteConfigGeneration(generation_file, generation, "applied");
        return supervise();
      });
    });
  };

  // SIGHUP (`paseo-sandbox-admin gc`, and `deployment add|remove` after they wrote the config):
  // reload the config dir, then collect what no sandbox owns. A valid config with helper.json
  // unchanged is swapped in (Config::ReplaceWith) and the broker restarted for its new policy;
  // running sandboxes are not touched, whatever deployment they belong to. An invalid one is
  // logged and the running config stays. Either way the outcome lands in config-generation.
  auto reload = [&] {
    ++generation;
    // With the host as read at start: the service's bounds (written to the cgroup then) and
    // the profile defaults derived from them stay what they are until a restart.
    auto next = LoadConfig(config_dir, (*config)->host());
    absl::Status loaded = next.ok() ? CheckConfigOwnership(config_dir) : next.status();
    if (loaded.ok() && (*config)->SameAs(**next)) {
      // Nothing changed (a plain `gc`): no reason to disconnect the broker's clients.
      Log(absl::StrCat("configuration unchanged (generation ", generation, ")"));
      if (!reload_restart) WriteConfigGeneration(generation_file, generation, "applied");
      return;
    }
    if (loaded.ok()) loaded = (*config)->ReplaceWith(std::move(*next));
    if (!loaded.ok()) {
      Log(absl::StrCat("reload refused, the running configuration stays: ", loaded.message()));
      WriteConfigGeneration(generation_file, generation,
                            absl::StrCat("refused: ", loaded.message()));
      return;
    }
    Log(absl::StrCat("configuration reloaded (generation ", generation, "): ",
                     (*config)->deployments().size(), " deployment(s), ",
                     (*config)->profiles().size(), " profile(s)"));
    if ((*config)->UsesSandboxNetwork() && networks == nullptr)
      Log("a profile now has network mode \"sandbox\", which this service did not set up: "
          "its creates are refused until the service restarts");
    if (link.get() != nullptr && link->pid > 0 && link->rpc.get() != nullptr) {
      // Closing the socketpair ends the broker (as at shutdown; no CAP_KILL is kept). Its
      // processes' stdio is kept here and handed to the next one, as after a crash.
      reload_restart = true;
      link->rpc = nullptr;
      link->network = nullptr;
      link->stream = nullptr;
    } else if (!reload_restart) {
      // No broker runs right now: the one the backoff starts fetches the new policy.
      WriteConfigGeneration(generation_file, generation, "applied");
    }
    // (A restart for an earlier reload still under way writes this generation once its broker
    // runs: it fetches the policy swapped in just now.)
  };
  kj::Function<kj::Promise<void>()> collect;
  collect = [&]() -> kj::Promise<void> {
    return events.onSignal(SIGHUP).then([&](siginfo_t) {
      Log("reload and garbage collection requested");
      reload();
      return host.Reconcile(config::RestartPolicy::KILL)
          .then([] { Log("garbage collection done"); },
                [](kj::Exception&& e) {
                  Log(std::string("garbage collection failed: ") + e.getDescription().cStr());
                })
          .then([&] { return collect(); });
    });
  };
  // The generation first, then the pid file that lets an operator's tools signal this
  // privhelper: whoever reads the new pid also reads this instance's generation, never the
  // number a killed predecessor left (which a reload's waiter would wait to exceed).
  WriteConfigGeneration(generation_file, generation, "loaded");
  std::string pid_file = run_dir + "/privhelper.pid";
  {
    std::string me = absl::StrCat(getpid(), "\n");
    int fd = open(pid_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd >= 0) {
      (void)!write(fd, me.data(), me.size());
      close(fd);
    }
  }
  auto why = supervise()
                 .then([] { return std::string("supervision ended"); })
                 .exclusiveJoin(collect().then([] { return std::string("gc ended"); }))
                 .exclusiveJoin(events.onSignal(SIGTERM).then(
                     [](siginfo_t) { return std::string("SIGTERM"); }))
                 .exclusiveJoin(events.onSignal(SIGINT).then(
                     [](siginfo_t) { return std::string("SIGINT"); }))
                 .exclusiveJoin(events.onSignal(SIGUSR2).then(
                     [](siginfo_t) { return std::string("SIGUSR2"); }))
                 .wait(io.waitScope);
  // SIGUSR2 (systemctl stop and restart: the unit's KillSignal) under onRestart "keep" stops for
  // a restart: the sandboxes, their spawners, the pinned control netns and the networks stay
  // for the next privhelper to adopt, exactly as after a SIGKILL, but the broker ends cleanly.
  // Under "kill", and on SIGTERM or SIGINT always, it is a clean stop that deletes them.
  const bool keep_sandboxes =
      why == "SIGUSR2" && helper.getOnRestart() == config::RestartPolicy::KEEP;
  Log(absl::StrCat("shutting down: ", why,
                   keep_sandboxes ? absl::StrCat(" (onRestart keep: ", host.size(),
                                                 " sandbox(es) kept for the next start)")
                                  : ""));
  sd_notify(0, "STOPPING=1");
  if (!socket_activated) unlink(socket_path.c_str());
  if (operator_fd.ok()) unlink(operator_path.c_str());
  unlink(pid_file.c_str());
  unlink(generation_file.c_str());
  if (link.get() != nullptr && link->pid > 0) {
    // Closing the socketpair ends the broker (it serves only while the privhelper is there);
    // the privhelper keeps no CAP_KILL to signal a process of another uid.
    auto exited = link->exit.addBranch().ignoreResult();
    link->rpc = nullptr;
    link->network = nullptr;
    link->stream = nullptr;
    auto timeout = timer.afterDelay(5 * kj::SECONDS).then([] {
      Log("broker did not exit within 5 s of the helper socket closing");
    });
    exited.exclusiveJoin(kj::mv(timeout)).wait(io.waitScope);
  }
  link = nullptr;
  if (keep_sandboxes) {
    // Nothing below runs, as after a SIGKILL: no delete, no unpin, no teardown of the networks
    // (their destructors would leave the host's links and firewall as they are, but skip them).
    std::fflush(nullptr);
    _exit(0);
  }
  host.DeleteAll().wait(io.waitScope);
  if (networks && host.size() == 0) networks->Stop();
  // Nothing left to reach in the control netns: unpin it (in the host's mount namespace, where
  // the pin lives). What lives there is runsc's sandboxes, so the pin stays for the next start
  // only while the host still lists a sandbox it could not delete and runsc's root still holds
  // state (a listed sandbox whose runsc state is gone has nothing there to reach; a sandbox's
  // socket file may outlive the delete for a moment, so an empty host unpins regardless).
  bool keep_pin = false;
  if (host.size() != 0) {
    keep_pin = true;
    if (DIR* d = opendir((run_dir + "/runsc").c_str())) {
      keep_pin = false;
      while (dirent* e = readdir(d)) {
        if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) keep_pin = true;
      }
      closedir(d);
    }
    Log(absl::StrCat(host.size(), " sandbox(es) could not be deleted at shutdown; ",
                     keep_pin ? "runsc's root still holds state: the control netns stays pinned"
                              : "runsc's root is empty: the control netns is unpinned"));
  }
  if (!keep_pin && host_mounts >= 0) {
    // EINVAL while another thread still shares our filesystem attributes: a std::thread just
    // joined (the network code's) is reported done before the kernel drops its fs_struct
    // (do_exit releases the mm, waking the join, before the fs). Seen in CI as the pin left
    // after a clean exit (capability_test, conformance_test); it passes within milliseconds.
    int err = 0;
    for (int i = 0; i < 200; ++i) {
      err = setns(host_mounts, CLONE_NEWNS) == 0 ? 0 : errno;
      if (err != EINVAL) break;
      usleep(10000);
    }
    if (err == 0) {
      umount2(netns_pin.c_str(), MNT_DETACH);
      unlink(netns_pin.c_str());
    } else {
      Log(absl::StrCat("cannot unpin the control netns: setns: ", strerror(err)));
    }
  }
  return 0;
}

// The command line, through kj's MainBuilder (which adds --help, --verbose and --version).
// The flags are part of the interface: the systemd unit, the installer's quickstart and the
// test harness pass them.
class PrivhelperMain {
 public:
  explicit PrivhelperMain(kj::ProcessContext& context) : context_(context) {}

  kj::MainFunc getMain() {
    return kj::MainBuilder(context_, "paseo-sandbox-privhelper",
                           "The root half of paseo-sandbox: loads and checks the root-owned "
                           "configuration, starts the unprivileged broker and serves its "
                           "requests, running every sandbox through the pinned runsc.")
        .addOptionWithArg({"config-dir"}, KJ_BIND_METHOD(*this, SetConfigDir), "<dir>",
                          "Root-owned configuration (default /etc/paseo-sandbox).")
        .addOption({"check-config"}, KJ_BIND_METHOD(*this, SetCheckOnly),
                   "Load and validate the configuration, then exit.")
        .addOptionWithArg({"without-capability"}, KJ_BIND_METHOD(*this, AddWithout), "<name>",
                          "(tests) Also drop capability <name> from the serving set; "
                          "repeatable.")
        .callAfterParsing(KJ_BIND_METHOD(*this, Run))
        .build();
  }

 private:
  kj::MainBuilder::Validity SetConfigDir(kj::StringPtr dir) {
    options_.config_dir = dir.cStr();
    return true;
  }
  kj::MainBuilder::Validity SetCheckOnly() {
    options_.check_only = true;
    return true;
  }
  kj::MainBuilder::Validity AddWithout(kj::StringPtr name) {
    options_.without.emplace_back(name.cStr());
    return true;
  }
  kj::MainBuilder::Validity Run() {
    int code = Serve(options_, context_.getProgramName().cStr());
    // The context ends the process with _exit(): flush what --check-config printed.
    std::fflush(nullptr);
    if (code != 0) context_.error("");  // already logged; only the exit status is left to set
    return true;
  }

  kj::ProcessContext& context_;
  Options options_;
};

}  // namespace
}  // namespace paseo

KJ_MAIN(paseo::PrivhelperMain)
