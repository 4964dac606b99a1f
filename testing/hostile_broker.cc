// A compromised broker: started by a real privhelper in place of paseo-sandbox-broker, it
// speaks the private helper protocol directly and tries what an authorized client could not.
// Each attempt prints one line "HOSTILE <case> ok" or "HOSTILE <case> refused <reason>" to
// stdout (the privhelper's log), then it exits. testing/hostile_broker_test.cc checks them.
#include <unistd.h>

#include <cstdio>
#include <functional>
#include <string>

#include <capnp/rpc-twoparty.h>
#include <kj/async-io.h>

#include "schema/helper.capnp.h"

namespace {

std::string Base() {
  // <base>/bin/paseo-sandbox-broker -> <base>
  char buf[4096] = {};
  ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  std::string exe(buf, n > 0 ? static_cast<size_t>(n) : 0);
  exe = exe.substr(0, exe.rfind('/'));
  return exe.substr(0, exe.rfind('/'));
}

void Report(const std::string& name, kj::Maybe<kj::Exception> error) {
  KJ_IF_MAYBE(e, error) {
    std::string d = e->getDescription().cStr();
    const std::string remote = "remote exception: ";
    while (d.rfind(remote, 0) == 0) d = d.substr(remote.size());
    std::printf("HOSTILE %s refused %s\n", name.c_str(), d.c_str());
  } else {
    std::printf("HOSTILE %s ok\n", name.c_str());
  }
  std::fflush(stdout);
}

}  // namespace

int main() {
  std::string base = Base();
  auto io = kj::setupAsyncIo();
  auto stream = io.lowLevelProvider->wrapUnixSocketFd(3, kj::LowLevelAsyncIoProvider::TAKE_OWNERSHIP);
  capnp::TwoPartyClient client(*stream, 3);
  auto helper = client.bootstrap().castAs<paseo::helper::Helper>();
  auto& ws = io.waitScope;

  // Every create names a client the way the real broker does; unless a case says otherwise,
  // alpha's allowed uid 4242. A compromised broker can name any client, so the privhelper
  // checks the claim against the deployment (and then the workspace against the claim).
  auto create = [&](const std::string& name, const std::string& id, const std::string& deployment,
                    const std::string& profile, const std::string& path, const std::string& dest,
                    uint32_t peer_uid = 4242, bool name_peer = true) {
    Report(name, kj::runCatchingExceptions([&] {
      auto req = helper.createSandboxRequest();
      auto r = req.initRequest();
      if (name_peer) {
        r.setPeerUid(peer_uid);
        r.initPeerGids(1).set(0, peer_uid);
      }
      r.setSandboxId(id);
      r.setDeploymentId(capnp::Text::Reader(deployment.data(), deployment.size()));
      r.setProfile(profile);
      if (!path.empty()) {
        auto m = r.initWorkspaces(1);
        m[0].setPath(capnp::Text::Reader(path.data(), path.size()));
        m[0].setDestination(dest);
        m[0].setMode(paseo::api::AccessMode::READ_WRITE);
      }
      req.send().wait(ws);
    }));
  };
  std::string alpha = base + "/ws-alpha";
  create("id-traversal", "../../etc", "alpha", "", alpha, "/workspace");
  create("id-uppercase", "SB", "alpha", "", alpha, "/workspace");
  create("host-etc", "sb-h1", "alpha", "", "/etc", "/workspace");
  create("dotdot", "sb-h2", "alpha", "", alpha + "/../outside", "/workspace");
  create("symlink-out", "sb-h3", "alpha", "", alpha + "/escape", "/workspace");
  create("other-deployment-root", "sb-h4", "alpha", "", base + "/ws-beta", "/workspace");
  create("unknown-deployment", "sb-h5", "gamma", "", alpha, "/workspace");
  create("unknown-profile", "sb-h6", "alpha", "big", alpha, "/workspace");
  create("dest-proc", "sb-h7", "alpha", "", alpha, "/proc/self");
  create("dest-rootfs-symlink", "sb-h8", "alpha", "", alpha, "/var/run/x");
  create("nul-in-path", "sb-h9", "alpha", "", alpha + std::string("\0/../outside", 12), "/workspace");
  create("proc-magic-link", "sb-h10", "alpha", "", "/proc/self/root/etc", "/workspace");
  create("nul-in-deployment", "sb-h11", std::string("alpha\0x", 7), "", alpha, "/workspace");
  // Regression (attack run item 1): the client a create is for.
  create("peer-root", "sb-h12", "alpha", "", alpha, "/workspace", 0);
  create("peer-of-another-deployment", "sb-h13", "alpha", "", alpha, "/workspace", 4343);
  create("peer-not-named", "sb-h14", "alpha", "", alpha, "/workspace", 0, false);
  create("peer-allowed-but-locked-out", "sb-h15", "alpha", "", alpha + "/locked/inner",
         "/workspace");

  // What an authorized client may do still works, and no more.
  create("legit-create", "sb-legit", "alpha", "", alpha, "/workspace");
  create("duplicate-id", "sb-legit", "alpha", "", alpha, "/workspace");
  auto start = [&](const std::string& name, const std::string& sandbox, const std::string& pid) {
    Report(name, kj::runCatchingExceptions([&] {
      auto req = helper.startProcessRequest();
      auto r = req.initRequest();
      r.setSandboxId(sandbox);
      r.setProcessId(pid);
      auto argv = r.initArgv(1);
      argv.set(0, "/bin/true");
      req.send().wait(ws);
    }));
  };
  start("start-missing-sandbox", "sb-nope", "p-1");
  start("start-bad-process-id", "sb-legit", "../p");
  start("legit-start", "sb-legit", "p-1");
  start("duplicate-process", "sb-legit", "p-1");
  Report("wait-missing", kj::runCatchingExceptions([&] {
    auto req = helper.waitProcessRequest();
    req.setSandboxId("sb-legit");
    req.setProcessId("p-nope");
    req.send().wait(ws);
  }));
  Report("signal-out-of-range", kj::runCatchingExceptions([&] {
    auto req = helper.signalProcessRequest();
    req.setSandboxId("sb-legit");
    req.setProcessId("p-1");
    req.setSignal(99);
    req.send().wait(ws);
  }));
  Report("signal-zero", kj::runCatchingExceptions([&] {
    auto req = helper.signalProcessRequest();
    req.setSandboxId("sb-legit");
    req.setProcessId("p-1");
    req.setSignal(0);
    req.send().wait(ws);
  }));
  // Every method that names a process refuses an id that is not one, before looking it up.
  Report("wait-traversal", kj::runCatchingExceptions([&] {
    auto req = helper.waitProcessRequest();
    req.setSandboxId("sb-legit");
    req.setProcessId("../p-1");
    req.send().wait(ws);
  }));
  Report("reattach-traversal", kj::runCatchingExceptions([&] {
    auto req = helper.reattachRequest();
    req.setSandboxId("../sb-legit");
    req.setProcessId("p-1");
    req.send().wait(ws);
  }));
  Report("close-input-nul", kj::runCatchingExceptions([&] {
    auto req = helper.closeInputRequest();
    req.setSandboxId("sb-legit");
    req.setProcessId(capnp::Text::Reader("p-1\0x", 5));
    req.send().wait(ws);
  }));
  Report("delete-traversal", kj::runCatchingExceptions([&] {
    auto req = helper.deleteSandboxRequest();
    req.setSandboxId("..");
    req.send().wait(ws);
  }));
  Report("legit-delete", kj::runCatchingExceptions([&] {
    auto req = helper.deleteSandboxRequest();
    req.setSandboxId("sb-legit");
    req.send().wait(ws);
  }));
  Report("delete-twice", kj::runCatchingExceptions([&] {
    // Once its background teardown is over (a delete still tearing down answers as the first
    // did), the sandbox is gone: a second delete names nothing.
    auto gone = helper.awaitGoneRequest();
    gone.setSandboxId("sb-legit");
    gone.send().wait(ws);
    auto req = helper.deleteSandboxRequest();
    req.setSandboxId("sb-legit");
    req.send().wait(ws);
  }));
  std::printf("HOSTILE done\n");
  std::fflush(stdout);
  return 0;
}
