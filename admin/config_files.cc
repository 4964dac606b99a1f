// See config_files.h.
#include "admin/config_files.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <capnp/compat/json.h>
#include <capnp/message.h>
#include <kj/exception.h>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "common/ids.h"
#include "common/status.h"
#include "schema/config.capnp.h"

namespace paseo::admin {
namespace {

// The names of the *.json files directly in `dir` (none if it does not exist).
absl::StatusOr<std::vector<std::string>> JsonNames(const std::string& dir) {
  std::vector<std::string> names;
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) {
    if (errno == ENOENT) return names;
    return ErrnoStatus("opendir", dir);
  }
  while (dirent* e = readdir(d)) {
    std::string name = e->d_name;
    if (name.size() > 5 && absl::EndsWith(name, ".json")) names.push_back(name);
  }
  closedir(d);
  return names;
}

absl::Status WriteAll(int fd, const std::string& contents, const std::string& path) {
  for (size_t done = 0; done < contents.size();) {
    ssize_t n = write(fd, contents.data() + done, contents.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus("write", path);
    }
    done += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

absl::Status FsyncDir(const std::string& dir) {
  int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus("open", dir);
  int rc = fsync(fd);
  int err = errno;
  close(fd);
  if (rc != 0) return ErrnoStatus("fsync", dir, err);
  return absl::OkStatus();
}

std::string DirOf(const std::string& path) {
  size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

}  // namespace

absl::StatusOr<std::string> ReadWholeFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return ErrnoStatus("open", path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

absl::StatusOr<std::unique_ptr<Config>> ValidateChange(const std::string& config_dir,
                                                       const ConfigChange& change,
                                                       const std::string& scratch_parent) {
  // The change must stay a config file: LoadConfig reads only these two folders.
  if (!(absl::StartsWith(change.relative_path, "deployments/") ||
        absl::StartsWith(change.relative_path, "profiles/")) ||
      absl::StrContains(change.relative_path.substr(change.relative_path.find('/') + 1), "/") ||
      !absl::EndsWith(change.relative_path, ".json"))
    return absl::InvalidArgumentError(
        absl::StrCat(change.relative_path, ": not a deployment or profile file"));
  std::string stage = scratch_parent + "/paseo-sandbox-admin.XXXXXX";
  if (mkdtemp(stage.data()) == nullptr) return ErrnoStatus("mkdtemp", stage);
  absl::Cleanup remove_stage = [&stage] {
    std::error_code ec;
    std::filesystem::remove_all(stage, ec);
  };
  for (const char* sub : {"deployments", "profiles"}) {
    std::string to = absl::StrCat(stage, "/", sub);
    if (mkdir(to.c_str(), 0700) != 0) return ErrnoStatus("mkdir", to);
    ASSIGN_OR_RETURN(auto names, JsonNames(absl::StrCat(config_dir, "/", sub)));
    for (const auto& name : names) {
      ASSIGN_OR_RETURN(std::string text, ReadWholeFile(absl::StrCat(config_dir, "/", sub, "/", name)));
      std::ofstream(absl::StrCat(to, "/", name), std::ios::binary) << text;
    }
  }
  {
    auto helper = ReadWholeFile(config_dir + "/helper.json");
    // A missing helper.json is left missing: LoadConfig names it (NotFound).
    if (helper.ok()) std::ofstream(stage + "/helper.json", std::ios::binary) << *helper;
  }
  std::string target = absl::StrCat(stage, "/", change.relative_path);
  if (change.contents.has_value()) {
    std::ofstream out(target, std::ios::binary | std::ios::trunc);
    out << *change.contents;
    if (!out.good()) return ErrnoStatus("write", target);
  } else if (unlink(target.c_str()) != 0) {
    return ErrnoStatus("remove", absl::StrCat(config_dir, "/", change.relative_path));
  }
  auto config = LoadConfig(stage);
  if (!config.ok()) {
    // The operator knows the real dir, not our copy of it.
    return absl::Status(config.status().code(),
                        absl::StrReplaceAll(config.status().message(), {{stage, config_dir}}));
  }
  return config;
}

absl::Status WriteFileAtomically(const std::string& path, const std::string& contents,
                                 mode_t mode) {
  std::string dir = DirOf(path);
  std::string tmp = absl::StrCat(dir, "/.", path.substr(dir.size() + 1), ".XXXXXX");
  int fd = mkostemp(tmp.data(), O_CLOEXEC);
  if (fd < 0) return ErrnoStatus("create", tmp);
  bool renamed = false;
  absl::Cleanup cleanup = [&] {
    close(fd);
    if (!renamed) unlink(tmp.c_str());
  };
  RETURN_IF_ERROR(WriteAll(fd, contents, tmp));
  // Root-owned when root writes it: the privhelper refuses config anyone else could change.
  if (geteuid() == 0 && fchown(fd, 0, 0) != 0) return ErrnoStatus("chown", tmp);
  if (fchmod(fd, mode) != 0) return ErrnoStatus("chmod", tmp);
  if (fsync(fd) != 0) return ErrnoStatus("fsync", tmp);
  if (rename(tmp.c_str(), path.c_str()) != 0) return ErrnoStatus("rename", tmp);
  renamed = true;
  return FsyncDir(dir);
}

absl::Status RemoveFileDurably(const std::string& path) {
  if (unlink(path.c_str()) != 0) return ErrnoStatus("remove", path);
  return FsyncDir(DirOf(path));
}

std::string DeploymentJson(const DeploymentSpec& spec) {
  capnp::MallocMessageBuilder message;
  auto d = message.initRoot<config::Deployment>();
  d.setId(spec.id);
  auto uids = d.initAllowedUids(spec.allowed_uids.size());
  for (size_t i = 0; i < spec.allowed_uids.size(); ++i) uids.set(i, spec.allowed_uids[i]);
  if (!spec.allowed_gids.empty()) {
    auto gids = d.initAllowedGids(spec.allowed_gids.size());
    for (size_t i = 0; i < spec.allowed_gids.size(); ++i) gids.set(i, spec.allowed_gids[i]);
  }
  auto roots = d.initWorkspaceRoots(spec.workspace_roots.size());
  for (size_t i = 0; i < spec.workspace_roots.size(); ++i) {
    roots[i].setHostPath(spec.workspace_roots[i].host_path);
    if (!spec.workspace_roots[i].client_path.empty())
      roots[i].setClientPath(spec.workspace_roots[i].client_path);
  }
  if (spec.run_as) {
    d.initRunAs().setUid(spec.run_as->first);
    d.getRunAs().setGid(spec.run_as->second);
  }
  if (!spec.profiles.empty()) {
    auto profiles = d.initProfiles(spec.profiles.size());
    for (size_t i = 0; i < spec.profiles.size(); ++i) profiles.set(i, spec.profiles[i]);
  }
  if (spec.max_sandboxes) d.setMaxSandboxes(*spec.max_sandboxes);
  capnp::JsonCodec codec;
  codec.setPrettyPrint(true);
  // Unset and default fields stay out of the file, as an operator would write it.
  codec.setHasMode(capnp::HasMode::NON_DEFAULT);
  kj::String text = codec.encode(d.asReader());
  return absl::StrCat(text.cStr(), "\n");
}

DeploymentSpec::Root ParseRoot(const std::string& text) {
  size_t colon = text.find(':');
  if (colon == std::string::npos) return {text, ""};
  return {text.substr(0, colon), text.substr(colon + 1)};
}

absl::StatusOr<std::string> DeploymentIdOf(const std::string& json, const std::string& file) {
  capnp::MallocMessageBuilder message;
  auto root = message.initRoot<config::Deployment>();
  capnp::JsonCodec codec;
  kj::Maybe<kj::Exception> error = kj::runCatchingExceptions(
      [&] { codec.decode(kj::ArrayPtr<const char>(json.data(), json.size()), root); });
  KJ_IF_MAYBE(e, error) {
    return absl::InvalidArgumentError(absl::StrCat(file, ": ", e->getDescription().cStr()));
  }
  std::string id = root.getId().cStr();
  // It becomes a file name: validated here, where it does (LoadConfig checks it again).
  if (!IsValidId(id)) return absl::InvalidArgumentError(absl::StrCat(file, ": id: must be an id ([a-z0-9-])"));
  return id;
}

absl::StatusOr<std::string> FileOfDeployment(const std::string& config_dir,
                                             const std::string& id) {
  std::string dir = config_dir + "/deployments";
  ASSIGN_OR_RETURN(auto names, JsonNames(dir));
  for (const auto& name : names) {
    std::string path = absl::StrCat(dir, "/", name);
    ASSIGN_OR_RETURN(std::string text, ReadWholeFile(path));
    auto declared = DeploymentIdOf(text, path);
    if (declared.ok() && *declared == id) return path;
  }
  return absl::NotFoundError(absl::StrCat("no file under ", dir, " defines deployment \"", id, "\""));
}

absl::StatusOr<HelperDirs> ReadHelperDirs(const std::string& config_dir) {
  std::string path = config_dir + "/helper.json";
  ASSIGN_OR_RETURN(std::string text, ReadWholeFile(path));
  capnp::MallocMessageBuilder message;
  auto root = message.initRoot<config::HelperConfig>();
  capnp::JsonCodec codec;
  kj::Maybe<kj::Exception> error = kj::runCatchingExceptions(
      [&] { codec.decode(kj::ArrayPtr<const char>(text.data(), text.size()), root); });
  KJ_IF_MAYBE(e, error) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", e->getDescription().cStr()));
  }
  return HelperDirs{root.getStateDir().cStr(), root.getRunDir().cStr()};
}

}  // namespace paseo::admin
