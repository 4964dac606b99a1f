// See config.h.
#include "absl/strings/string_view.h"
#include "privhelper/config.h"

#include <capnp/any.h>
#include "privhelper/network/sandbox_network.h"

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>

#include <capnp/compat/json.h>
#include <capnp/schema.h>
#include <kj/exception.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/ascii.h"
#include "common/ids.h"
#include "common/request_checks.h"
#include "common/status.h"

namespace paseo {
namespace {

absl::Status Bad(const std::string& file, absl::string_view field, absl::string_view problem) {
  return absl::InvalidArgumentError(absl::StrCat(file, ": ", field, ": ", problem));
}

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return ErrnoStatus("open", path);
  std::stringstream buf;
  buf << in.rdbuf();
  if (buf.str().size() > (1 << 20)) return Bad(path, "(file)", "larger than 1 MiB");
  return buf.str();
}

// Checks a raw JSON value against the schema type it must decode into, so that an unknown field
// or a type mismatch is reported with the field's path (JsonCodec's own messages do not name
// the field on a type mismatch).
absl::Status CheckShape(const std::string& file, const std::string& path,
                        capnp::JsonValue::Reader value, capnp::Type type) {
  auto want = [&](const char* what) { return Bad(file, path, absl::StrCat("expected ", what)); };
  switch (type.which()) {
    case capnp::schema::Type::TEXT:
    case capnp::schema::Type::ENUM:
      return value.isString() ? absl::OkStatus() : want("a string");
    case capnp::schema::Type::BOOL:
      return value.isBoolean() ? absl::OkStatus() : want("true or false");
    case capnp::schema::Type::INT8:
    case capnp::schema::Type::INT16:
    case capnp::schema::Type::INT32:
    case capnp::schema::Type::UINT8:
    case capnp::schema::Type::UINT16:
    case capnp::schema::Type::UINT32:
    case capnp::schema::Type::FLOAT32:
    case capnp::schema::Type::FLOAT64:
      return value.isNumber() ? absl::OkStatus() : want("a number");
    case capnp::schema::Type::INT64:
    case capnp::schema::Type::UINT64:
      // JsonCodec writes 64-bit integers as strings and reads either form.
      return value.isNumber() || value.isString() ? absl::OkStatus() : want("a number");
    case capnp::schema::Type::LIST: {
      if (!value.isArray()) return want("a list");
      auto element = type.asList().getElementType();
      auto items = value.getArray();
      for (unsigned i = 0; i < items.size(); ++i)
        RETURN_IF_ERROR(CheckShape(file, absl::StrCat(path, "[", i, "]"), items[i], element));
      return absl::OkStatus();
    }
    case capnp::schema::Type::STRUCT: {
      if (!value.isObject()) return want("an object");
      auto schema = type.asStruct();
      for (auto field : value.getObject()) {
        std::string name = field.getName();
        std::string where = path.empty() ? name : absl::StrCat(path, ".", name);
        KJ_IF_MAYBE(f, schema.findFieldByName(field.getName())) {
          RETURN_IF_ERROR(CheckShape(file, where, field.getValue(), f->getType()));
        } else {
          return Bad(file, where, "unknown field");
        }
      }
      return absl::OkStatus();
    }
    default:
      return absl::OkStatus();
  }
}

// capnp 0.9.2's JSON parser decodes the hex letters of a \uXXXX escape wrongly
// (capnproto/capnproto#1552), which would silently turn one path into another. Refuse such
// escapes; \u escapes with decimal digits only, and plain UTF-8, decode correctly.
absl::Status RefuseHexLetterEscapes(const std::string& file, const std::string& text) {
  for (size_t i = 0; i + 1 < text.size(); ++i) {
    if (text[i] != '\\') continue;
    if (text[i + 1] == 'u') {
      for (size_t j = i + 2; j < i + 6 && j < text.size(); ++j) {
        if (std::isalpha(static_cast<unsigned char>(text[j])))
          return Bad(file, "(text)",
                     "\\u escapes with hex letters are not supported; write the character as "
                     "UTF-8 instead");
      }
    }
    ++i;  // skip the escaped character (handles "\\\\u...")
  }
  return absl::OkStatus();
}

// Decodes one JSON file into a fresh message whose root is T.
template <typename T>
absl::StatusOr<typename T::Reader> Decode(
    const std::string& path, std::vector<std::unique_ptr<capnp::MallocMessageBuilder>>& keep) {
  ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  RETURN_IF_ERROR(RefuseHexLetterEscapes(path, text));
  capnp::MallocMessageBuilder raw;
  capnp::JsonCodec codec;
  codec.setRejectUnknownFields(true);
  auto root = raw.initRoot<capnp::JsonValue>();
  kj::Maybe<kj::Exception> error = kj::runCatchingExceptions(
      [&] { codec.decodeRaw(kj::ArrayPtr<const char>(text.data(), text.size()), root); });
  KJ_IF_MAYBE(e, error) {
    return Bad(path, "(syntax)", absl::StrCat("not valid JSON: ", e->getDescription().cStr()));
  }
  RETURN_IF_ERROR(CheckShape(path, "", root.asReader(), capnp::Type(capnp::Schema::from<T>())));
  auto message = std::make_unique<capnp::MallocMessageBuilder>();
  error = kj::runCatchingExceptions([&] { codec.decode(root.asReader(), message->initRoot<T>()); });
  KJ_IF_MAYBE(e, error) {
    return Bad(path, "(decode)", e->getDescription().cStr());
  }
  auto reader = message->getRoot<T>().asReader();
  keep.push_back(std::move(message));
  return reader;
}

absl::StatusOr<std::vector<std::string>> JsonFilesIn(const std::string& dir) {
  std::vector<std::string> files;
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) {
    if (errno == ENOENT) return files;
    return ErrnoStatus("opendir", dir);
  }
  while (dirent* e = readdir(d)) {
    std::string name = e->d_name;
    if (name.size() > 5 && absl::EndsWith(name, ".json")) files.push_back(dir + "/" + name);
  }
  closedir(d);
  std::sort(files.begin(), files.end());
  return files;
}

bool IsHexSha256(absl::string_view s) {
  return s.size() == 64 && std::all_of(s.begin(), s.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

bool IsUnder(absl::string_view path, absl::string_view dir) {
  return path == dir || absl::StartsWith(path, absl::StrCat(dir, "/"));
}

// A destination the config fixes inside every sandbox (a credential's, a tool's): normalized,
// absolute, not /, and not under what the bundle itself mounts.
absl::Status CheckFixedDestination(const std::string& file, const std::string& field,
                                   capnp::Text::Reader destination) {
  std::string dest = destination.cStr();
  if (!IsNormalizedAbsolutePath(dest) || dest == "/")
    return Bad(file, field, "must be a normalized absolute path other than /");
  for (const char* reserved : {"/proc", "/sys", "/dev", "/tmp", "/.paseo"}) {
    if (IsUnder(dest, reserved)) return Bad(file, field, absl::StrCat("may not be under ", reserved));
  }
  return absl::OkStatus();
}

// A profile's tools: unique names, destinations that can stand in PATH (no ':') and overlap
// neither each other nor the profile's credentials (runsc would mount one over the other).
absl::Status ValidateToolMounts(const std::string& file, config::LaunchProfile::Reader p) {
  if (p.getTools().size() > kMaxToolMounts)
    return Bad(file, "tools", absl::StrCat("at most ", kMaxToolMounts, " tools"));
  std::set<std::string> names;
  std::vector<std::string> taken;
  for (auto c : p.getCredentials()) taken.emplace_back(c.getDestination().cStr());
  for (size_t i = 0; i < p.getTools().size(); ++i) {
    auto t = p.getTools()[i];
    std::string where = absl::StrCat("tools[", i, "]");
    if (!IsValidId(t.getName().cStr()) || !names.insert(t.getName().cStr()).second)
      return Bad(file, where + ".name", "must be a unique id ([a-z0-9-])");
    RETURN_IF_ERROR(CheckFixedDestination(file, where + ".destination", t.getDestination()));
    std::string dest = t.getDestination().cStr();
    if (dest.find(':') != std::string::npos)
      return Bad(file, where + ".destination", "may not contain ':' (it goes on PATH)");
    for (const auto& other : taken) {
      if (IsUnder(dest, other) || IsUnder(other, dest))
        return Bad(file, where + ".destination",
                   absl::StrCat("overlaps ", other, " (another tool's or a credential's)"));
    }
    taken.push_back(dest);
  }
  return absl::OkStatus();
}

// Where a workspace root is as clients see it.
absl::string_view ClientView(config::WorkspaceRoot::Reader root) {
  return root.getClientPath().size() > 0 ? root.getClientPath().cStr() : root.getHostPath().cStr();
}

// A deployment's tool roots: unique names, and each either a host path or a client path that
// lies beneath one of the deployment's workspace roots (where ResolveTool will map it).
absl::Status ValidateToolRoots(const std::string& file, config::Deployment::Reader d) {
  if (d.getToolRoots().size() > kMaxToolMounts)
    return Bad(file, "toolRoots", absl::StrCat("at most ", kMaxToolMounts, " tool roots"));
  std::set<std::string> names;
  for (size_t i = 0; i < d.getToolRoots().size(); ++i) {
    auto t = d.getToolRoots()[i];
    std::string where = absl::StrCat("toolRoots[", i, "]");
    if (!IsValidId(t.getName().cStr()) || !names.insert(t.getName().cStr()).second)
      return Bad(file, where + ".name", "must be a unique id ([a-z0-9-])");
    bool host = t.getHostPath().size() > 0, client = t.getClientPath().size() > 0;
    if (host == client)
      return Bad(file, where, "set exactly one of hostPath and clientPath");
    if (host) {
      if (!IsNormalizedAbsolutePath(t.getHostPath().cStr()) || t.getHostPath() == "/")
        return Bad(file, where + ".hostPath", "must be a normalized absolute path other than /");
      continue;
    }
    absl::string_view path = t.getClientPath().cStr();
    if (!IsNormalizedAbsolutePath(path) || path == "/")
      return Bad(file, where + ".clientPath", "must be a normalized absolute path other than /");
    bool beneath = false;
    for (auto root : d.getWorkspaceRoots()) beneath |= IsUnder(path, ClientView(root));
    if (!beneath)
      return Bad(file, where + ".clientPath",
                 "must lie beneath one of the deployment's workspaceRoots (as the client sees "
                 "them)");
  }
  return absl::OkStatus();
}

// Every tool a profile the deployment may use places must be one the deployment registers, so
// a sandbox never silently lacks a tool (and a PATH entry) its profile promises.
absl::Status CheckToolsRegistered(const std::string& file, const Config& config,
                                  config::Deployment::Reader d) {
  for (const auto& name : config.ProfilesOf(d)) {
    for (auto tool : config.FindProfile(name)->getTools()) {
      bool registered = false;
      for (auto root : d.getToolRoots()) registered |= root.getName() == tool.getName();
      if (!registered)
        return Bad(file, "toolRoots",
                   absl::StrCat("profile \"", name, "\" places tool \"", tool.getName().cStr(),
                                "\", which this deployment does not register"));
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateHelperNetwork(const std::string& file, config::HelperNetwork::Reader n);
absl::Status ValidateAudit(const std::string& file, config::AuditConfig::Reader a);

absl::Status ValidateHelper(const std::string& file, config::HelperConfig::Reader h) {
  if (!IsNormalizedAbsolutePath(h.getStateDir().cStr()))
    return Bad(file, "stateDir", "must be a normalized absolute path");
  if (!IsNormalizedAbsolutePath(h.getRunDir().cStr()))
    return Bad(file, "runDir", "must be a normalized absolute path");
  if (h.getBrokerUser().size() == 0) return Bad(file, "brokerUser", "must not be empty");
  if (h.getSocketGroup().size() == 0) return Bad(file, "socketGroup", "must not be empty");
  if (h.hasBrokerBinary() && h.getBrokerBinary().size() > 0 &&
      !IsNormalizedAbsolutePath(h.getBrokerBinary().cStr()))
    return Bad(file, "brokerBinary", "must be a normalized absolute path");
  if (h.getNetwork().getEgressBinary().size() > 0 &&
      !IsNormalizedAbsolutePath(h.getNetwork().getEgressBinary().cStr()))
    return Bad(file, "network.egressBinary", "must be a normalized absolute path");
  if (h.hasSandboxShim() && h.getSandboxShim().size() > 0 &&
      !IsNormalizedAbsolutePath(h.getSandboxShim().cStr()))
    return Bad(file, "sandboxShim", "must be a normalized absolute path");
  auto runsc = h.getRunsc();
  if (!IsNormalizedAbsolutePath(runsc.getPath().cStr()))
    return Bad(file, "runsc.path", "must be a normalized absolute path");
  if (!IsHexSha256(runsc.getSha256().cStr()))
    return Bad(file, "runsc.sha256", "must be 64 lowercase hex digits");
  std::string platform = runsc.getPlatform();
  if (platform != "auto" && platform != "systrap" && platform != "ptrace" && platform != "kvm")
    return Bad(file, "runsc.platform", "must be \"auto\", \"systrap\", \"ptrace\" or \"kvm\"");
  if (!IsNormalizedAbsolutePath(h.getCgroupParent().cStr()) || h.getCgroupParent() == "/")
    return Bad(file, "cgroupParent", "must be a normalized absolute path other than /");
  if (!IsValidId(h.getRootfsVersion().cStr()))
    return Bad(file, "rootfsVersion", "must be an id ([a-z0-9-], 1..64 bytes)");
  RETURN_IF_ERROR(ValidateAudit(file, h.getAudit()));
  // 0 = the host-derived default; explicit values must leave room for a sandbox.
  auto service = h.getServiceLimits();
  uint64_t memory = service.getMemoryBytes();
  if (memory != 0 && (memory < (512ull << 20) || memory > (1ull << 50)))
    return Bad(file, "serviceLimits.memoryBytes",
               "must be between 536870912 (512 MiB) and 2^50, or 0 for the host-derived default");
  if (service.getCpuMillis() != 0 && (service.getCpuMillis() < 100 || service.getCpuMillis() > 1024000))
    return Bad(file, "serviceLimits.cpuMillis",
               "must be between 100 and 1024000, or 0 for the host-derived default");
  if (service.getMaxHostTasks() != 0 &&
      (service.getMaxHostTasks() < 1024 || service.getMaxHostTasks() > (1u << 22)))
    return Bad(file, "serviceLimits.maxHostTasks",
               "must be between 1024 and 4194304, or 0 for the host-derived default");
  return ValidateHelperNetwork(file, h.getNetwork());
}

// HelperConfig.audit: the file's directory must be a dedicated one below another directory (the
// privhelper makes it the broker's), and the bounds must make maxBytes * maxFiles meaningful.
absl::Status ValidateAudit(const std::string& file, config::AuditConfig::Reader a) {
  std::string path = a.getPath().cStr();
  if (!path.empty()) {
    size_t slash = path.rfind('/');
    if (!IsNormalizedAbsolutePath(path) || slash == 0 || slash == std::string::npos ||
        slash + 1 == path.size())
      return Bad(file, "audit.path",
                 "must be a normalized absolute path of a file in a directory other than /");
  }
  if (a.getMaxBytes() < kMinAuditFileBytes || a.getMaxBytes() > (uint64_t{1} << 40))
    return Bad(file, "audit.maxBytes", absl::StrCat("must be between ", kMinAuditFileBytes,
                                                    " and 2^40"));
  if (a.getMaxFiles() < 1 || a.getMaxFiles() > 100)
    return Bad(file, "audit.maxFiles", "must be between 1 and 100");
  if (a.getRefusalsPerSecond() < 1 || a.getRefusalsPerSecond() > 1000000)
    return Bad(file, "audit.refusalsPerSecond", "must be between 1 and 1000000");
  return absl::OkStatus();
}

// The home: a fixed destination that can stand in /etc/passwd (no ':' or newline), which
// credentials and tools may lie beneath but not cover (the tmpfs is mounted before them).
// HelperConfig.network: the pool is a /16../24 that cannot hold an always-denied range.
absl::Status ValidateHelperNetwork(const std::string& file, config::HelperNetwork::Reader n) {
  auto pool = network::ParseCidr(n.getPool().cStr());
  if (!pool || pool->prefix < 16 || pool->prefix > 24)
    return Bad(file, "network.pool", "must be an IPv4 prefix from /16 to /24 (\"10.88.0.0/16\")");
  for (const char* reserved : {"0.0.0.0/8", "127.0.0.0/8", "169.254.0.0/16", "224.0.0.0/3"}) {
    if (pool->Overlaps(*network::ParseCidr(reserved)))
      return Bad(file, "network.pool", absl::StrCat("overlaps the reserved ", reserved));
  }
  if (n.getDnsUpstreams().size() > kMaxNetworkRules)
    return Bad(file, "network.dnsUpstreams", "too many entries");
  for (size_t i = 0; i < n.getDnsUpstreams().size(); ++i) {
    if (!network::ParseEndpoint(n.getDnsUpstreams()[i].cStr()))
      return Bad(file, absl::StrCat("network.dnsUpstreams[", i, "]"),
                 "must be \"a.b.c.d\" or \"a.b.c.d:port\"");
  }
  std::string uplink = n.getUplink().cStr();
  if (uplink.size() >= 16 || uplink.find_first_of("/\" \n\t*") != std::string::npos ||
      absl::StartsWith(uplink, network::kHostIfnamePrefix))
    return Bad(file, "network.uplink", "must be an interface name (not a sandbox link)");
  if (n.getEgressTrustedCa().size() > 0 && !IsNormalizedAbsolutePath(n.getEgressTrustedCa().cStr()))
    return Bad(file, "network.egressTrustedCa", "must be a normalized absolute path");
  return absl::OkStatus();
}

// Secrets (decision 59). What a header may be: a lower-case token, not one that frames or
// routes the request (the proxy's checks read those).
bool IsSecretHeader(absl::string_view h) {
  if (h.empty() || h.size() > 64) return false;
  for (char c : h)
    if (!(absl::ascii_islower(c) || absl::ascii_isdigit(c) || c == '-')) return false;
  for (const char* framing : {"host", "content-length", "transfer-encoding", "connection", "upgrade",
                              "te", "trailer", "expect", "keep-alive", "proxy-connection"})
    if (h == framing) return false;
  return true;
}

bool IsEnvName(absl::string_view v) {
  if (v.empty() || v.size() > 64 || absl::ascii_isdigit(v[0])) return false;
  for (char c : v)
    if (!(absl::ascii_isupper(c) || absl::ascii_isdigit(c) || c == '_')) return false;
  for (const char* taken : {"PATH", "HOME", "TERM", "NODE_EXTRA_CA_CERTS"})
    if (v == taken) return false;
  return !absl::StartsWith(v, kReservedEnvPrefix);
}

absl::Status ValidateSecrets(const std::string& file, config::Deployment::Reader d) {
  if (d.getSecrets().size() > kMaxSecrets)
    return Bad(file, "secrets", absl::StrCat("at most ", kMaxSecrets, " secrets"));
  std::set<std::string> names;
  for (size_t i = 0; i < d.getSecrets().size(); ++i) {
    auto s = d.getSecrets()[i];
    std::string where = absl::StrCat("secrets[", i, "]");
    if (!IsValidId(s.getName().cStr()) || !names.insert(s.getName().cStr()).second)
      return Bad(file, where + ".name", "must be a unique id ([a-z0-9-])");
    if (!IsNormalizedAbsolutePath(s.getPath().cStr()) || s.getPath() == "/")
      return Bad(file, where + ".path", "must be a normalized absolute path");
    if (s.getHosts().size() == 0 || s.getHosts().size() > 16)
      return Bad(file, where + ".hosts", "must name 1 to 16 hosts");
    for (auto h : s.getHosts()) {
      if (!network::IsValidNamePattern(h.cStr()) || absl::StartsWith(h.cStr(), "*."))
        return Bad(file, where + ".hosts",
                   absl::StrCat("\"", h.cStr(), "\" is not a lower-case DNS name (no wildcard)"));
    }
    if (!IsSecretHeader(s.getHeader().cStr()))
      return Bad(file, where + ".header",
                 "must be a lower-case header name that does not frame or route the request "
                 "(\"x-api-key\", \"authorization\")");
    if (!IsEnvName(s.getEnvVar().cStr()))
      return Bad(file, where + ".envVar",
                 "must be an environment variable name ([A-Z_][A-Z0-9_]*, not PATH, HOME, TERM, "
                 "NODE_EXTRA_CA_CERTS or PASEO_SHIM_*)");
  }
  return absl::OkStatus();
}

absl::Status ValidateSecretUses(const std::string& file, config::LaunchProfile::Reader p) {
  if (p.getSecrets().size() > kMaxSecrets)
    return Bad(file, "secrets", absl::StrCat("at most ", kMaxSecrets, " secrets"));
  std::set<std::string> names;
  for (size_t i = 0; i < p.getSecrets().size(); ++i) {
    auto s = p.getSecrets()[i];
    std::string where = absl::StrCat("secrets[", i, "]");
    if (!IsValidId(s.getName().cStr()) || !names.insert(s.getName().cStr()).second)
      return Bad(file, where + ".name", "must be a unique id ([a-z0-9-])");
    if (s.getFile().size() > 0)
      RETURN_IF_ERROR(CheckFixedDestination(file, where + ".file", s.getFile()));
  }
  if (p.getSecrets().size() > 0 && p.getNetwork().getMode() != config::NetworkMode::SANDBOX)
    return Bad(file, "secrets", "need network mode \"sandbox\" (they go through the egress proxy)");
  return absl::OkStatus();
}

// Every secret a profile the deployment may use asks for is registered by the deployment, and
// each of its hosts is one the profile's allowNames allow (else the placeholder could go nowhere
// the value would be put in); no two of a profile's secrets share an environment variable.
absl::Status CheckSecretsRegistered(const std::string& file, const Config& config,
                                    config::Deployment::Reader d) {
  for (const auto& name : config.ProfilesOf(d)) {
    auto profile = *config.FindProfile(name);
    std::set<std::string> vars;
    for (auto use : profile.getSecrets()) {
      std::optional<config::SecretRegistration::Reader> found;
      for (auto r : d.getSecrets())
        if (r.getName() == use.getName()) found = r;
      if (!found)
        return Bad(file, "secrets",
                   absl::StrCat("profile \"", name, "\" asks for secret \"", use.getName().cStr(),
                                "\", which this deployment does not register"));
      if (!vars.insert(found->getEnvVar().cStr()).second)
        return Bad(file, "secrets",
                   absl::StrCat("profile \"", name, "\" gets two secrets in ", found->getEnvVar().cStr()));
      for (auto host : found->getHosts()) {
        bool allowed = false;
        for (auto rule : profile.getNetwork().getAllowNames()) {
          absl::string_view pattern = rule.getName().cStr();
          absl::string_view h = host.cStr();
          allowed |= absl::StartsWith(pattern, "*.")
                         ? h.size() > pattern.size() - 1 && absl::EndsWith(h, pattern.substr(1))
                         : h == pattern;
        }
        if (!allowed)
          return Bad(file, "secrets",
                     absl::StrCat("secret \"", use.getName().cStr(), "\" is for ", host.cStr(),
                                  ", which profile \"", name, "\"'s allowNames do not allow"));
      }
    }
  }
  return absl::OkStatus();
}

// A list of ports: each 1..65535, none twice.
absl::Status CheckPorts(const std::string& file, const std::string& field,
                        capnp::List<uint16_t>::Reader ports) {
  if (ports.size() > kMaxNetworkRules) return Bad(file, field, "too many ports");
  std::set<uint16_t> seen;
  for (uint16_t p : ports) {
    if (p == 0) return Bad(file, field, "ports are 1..65535");
    if (!seen.insert(p).second) return Bad(file, field, absl::StrCat("port ", p, " is listed twice"));
  }
  return absl::OkStatus();
}

absl::Status ValidateNetworkPolicy(const std::string& file, config::NetworkPolicy::Reader n) {
  if (n.getAllowCidrs().size() > kMaxNetworkRules)
    return Bad(file, "network.allowCidrs", absl::StrCat("at most ", kMaxNetworkRules, " rules"));
  if (n.getAllowNames().size() > kMaxNetworkRules)
    return Bad(file, "network.allowNames", absl::StrCat("at most ", kMaxNetworkRules, " rules"));
  std::set<std::string> seen;
  for (size_t i = 0; i < n.getAllowCidrs().size(); ++i) {
    auto rule = n.getAllowCidrs()[i];
    std::string where = absl::StrCat("network.allowCidrs[", i, "]");
    auto cidr = network::ParseCidr(rule.getCidr().cStr());
    if (!cidr)
      return Bad(file, where + ".cidr",
                 "must be an IPv4 address or prefix without host bits (\"203.0.113.0/24\")");
    if (!seen.insert(cidr->ToString()).second)
      return Bad(file, where + ".cidr", "is listed twice");
    RETURN_IF_ERROR(CheckPorts(file, where + ".ports", rule.getPorts()));
  }
  seen.clear();
  for (size_t i = 0; i < n.getAllowNames().size(); ++i) {
    auto rule = n.getAllowNames()[i];
    std::string where = absl::StrCat("network.allowNames[", i, "]");
    if (!network::IsValidNamePattern(rule.getName().cStr()))
      return Bad(file, where + ".name",
                 "must be a lower-case DNS name (\"api.example.com\") or \"*.\" and one");
    if (!seen.insert(rule.getName().cStr()).second)
      return Bad(file, where + ".name", "is listed twice");
    RETURN_IF_ERROR(CheckPorts(file, where + ".ports", rule.getPorts()));
  }
  RETURN_IF_ERROR(CheckPorts(file, "network.inboundPorts", n.getInboundPorts()));
  if (n.getMode() == config::NetworkMode::NONE &&
      (n.getAllowCidrs().size() > 0 || n.getAllowNames().size() > 0 ||
       n.getInboundPorts().size() > 0))
    return Bad(file, "network.mode", "is \"none\": allow rules and inboundPorts need \"sandbox\"");
  return absl::OkStatus();
}

absl::Status ValidateHome(const std::string& file, config::LaunchProfile::Reader p) {
  RETURN_IF_ERROR(CheckFixedDestination(file, "homePath", p.getHomePath()));
  std::string home = p.getHomePath().cStr();
  if (home.find_first_of(":\n") != std::string::npos)
    return Bad(file, "homePath", "may not contain ':' or a newline (it goes in /etc/passwd)");
  std::vector<std::string> placed;
  for (auto c : p.getCredentials()) placed.emplace_back(c.getDestination().cStr());
  for (auto t : p.getTools()) placed.emplace_back(t.getDestination().cStr());
  for (const auto& dest : placed) {
    if (IsUnder(home, dest))
      return Bad(file, "homePath", absl::StrCat("lies in ", dest, " (a credential's or tool's)"));
  }
  if (p.getHomeBytes() < (1 << 20) || p.getHomeBytes() > (1ull << 40))
    return Bad(file, "homeBytes", "must be between 1048576 and 2^40");
  return absl::OkStatus();
}

absl::Status ValidateProfile(const std::string& file, config::LaunchProfile::Reader p) {
  if (!IsValidId(p.getName().cStr())) return Bad(file, "name", "must be an id ([a-z0-9-])");
  if (p.getRootfsVersion().size() > 0 && !IsValidId(p.getRootfsVersion().cStr()))
    return Bad(file, "rootfsVersion", "must be an id ([a-z0-9-])");
  if (p.getOutputBufferBytes() < 4096 || p.getOutputBufferBytes() > (1ull << 32))
    return Bad(file, "outputBufferBytes", "must be between 4096 and 4294967296");
  if (p.getTmpfsBytes() < (1 << 20)) return Bad(file, "tmpfsBytes", "must be at least 1048576");
  std::set<std::string> names;
  for (size_t i = 0; i < p.getCredentials().size(); ++i) {
    auto c = p.getCredentials()[i];
    std::string where = absl::StrCat("credentials[", i, "]");
    if (!IsValidId(c.getName().cStr()) || !names.insert(c.getName().cStr()).second)
      return Bad(file, where + ".name", "must be a unique id ([a-z0-9-])");
    RETURN_IF_ERROR(CheckFixedDestination(file, where + ".destination", c.getDestination()));
  }
  RETURN_IF_ERROR(ValidateToolMounts(file, p));
  RETURN_IF_ERROR(ValidateHome(file, p));
  RETURN_IF_ERROR(ValidateNetworkPolicy(file, p.getNetwork()));
  RETURN_IF_ERROR(ValidateSecretUses(file, p));
  // 0 = the host-derived default; explicit values must leave a sandbox able to run.
  uint64_t memory = p.getMemoryLimitBytes();
  if (memory != 0 && (memory < (64ull << 20) || memory > (1ull << 50)))
    return Bad(file, "memoryLimitBytes",
               "must be between 67108864 (64 MiB) and 2^50, or 0 for the host-derived default");
  if (p.getCpuMillis() != 0 && (p.getCpuMillis() < 10 || p.getCpuMillis() > 1024000))
    return Bad(file, "cpuMillis", "must be between 10 and 1024000, or 0 for the default");
  if (p.getMaxProcesses() != 0 && (p.getMaxProcesses() < 16 || p.getMaxProcesses() > (1u << 22)))
    return Bad(file, "maxProcesses", "must be between 16 and 4194304, or 0 for the default");
  if (p.getMaxHostTasks() != 0 && (p.getMaxHostTasks() < 256 || p.getMaxHostTasks() > (1u << 22)))
    return Bad(file, "maxHostTasks", "must be between 256 and 4194304, or 0 for the default");
  return absl::OkStatus();
}

absl::Status ValidateDeployment(const std::string& file, config::Deployment::Reader d) {
  if (!IsValidId(d.getId().cStr())) return Bad(file, "id", "must be an id ([a-z0-9-])");
  if (d.getAllowedUids().size() == 0 && d.getAllowedGids().size() == 0)
    return Bad(file, "allowedUids", "allowedUids and allowedGids are both empty");
  if (d.getWorkspaceRoots().size() == 0) return Bad(file, "workspaceRoots", "must not be empty");
  for (size_t i = 0; i < d.getWorkspaceRoots().size(); ++i) {
    auto root = d.getWorkspaceRoots()[i];
    std::string where = absl::StrCat("workspaceRoots[", i, "]");
    if (!IsNormalizedAbsolutePath(root.getHostPath().cStr()) || root.getHostPath() == "/")
      return Bad(file, where + ".hostPath", "must be a normalized absolute path other than /");
    if (root.getClientPath().size() > 0 && !IsNormalizedAbsolutePath(root.getClientPath().cStr()))
      return Bad(file, where + ".clientPath", "must be a normalized absolute path");
  }
  if (d.hasRunAs() && d.getRunAs().getUid() == 0)
    return Bad(file, "runAs.uid", "agents never run as root");
  if (d.hasRunAs() && d.getRunAs().getGid() == 0)
    return Bad(file, "runAs.gid", "agents never run with group 0");
  if (d.getMaxSandboxes() == 0 || d.getMaxSandboxes() > 1024)
    return Bad(file, "maxSandboxes", "must be between 1 and 1024");
  std::set<std::string> names;
  for (size_t i = 0; i < d.getCredentialRoots().size(); ++i) {
    auto c = d.getCredentialRoots()[i];
    std::string where = absl::StrCat("credentialRoots[", i, "]");
    if (!IsValidId(c.getName().cStr()) || !names.insert(c.getName().cStr()).second)
      return Bad(file, where + ".name", "must be a unique id ([a-z0-9-])");
    if (!IsNormalizedAbsolutePath(c.getHostPath().cStr()) || c.getHostPath() == "/")
      return Bad(file, where + ".hostPath", "must be a normalized absolute path other than /");
  }
  RETURN_IF_ERROR(ValidateSecrets(file, d));
  return ValidateToolRoots(file, d);
}

// Replaces each resource bound the profile left at 0 with the default; an explicit bound above
// the service's is refused (no sandbox of the profile could ever be created).
absl::Status ResolveProfileLimits(const std::string& file, config::LaunchProfile::Builder p,
                                  const ServiceBounds& service, const HostResources& host) {
  SandboxLimits requested;
  requested.memory_bytes = p.getMemoryLimitBytes();
  requested.cpu_millis = p.getCpuMillis();
  requested.max_processes = p.getMaxProcesses();
  requested.max_host_tasks = p.getMaxHostTasks();
  SandboxLimits limits = ResolveLimits(requested, service, host);
  auto above = [&](const char* field, uint64_t value, const char* service_field, uint64_t bound) {
    return Bad(file, field,
               absl::StrCat(value, " is above the bound on all sandboxes together (", bound,
                            ", helper.json serviceLimits.", service_field, ")"));
  };
  if (limits.memory_bytes > service.memory_bytes)
    return above("memoryLimitBytes", limits.memory_bytes, "memoryBytes", service.memory_bytes);
  if (limits.cpu_millis > service.cpu_millis)
    return above("cpuMillis", limits.cpu_millis, "cpuMillis", service.cpu_millis);
  if (limits.max_host_tasks > service.max_host_tasks)
    return above("maxHostTasks", limits.max_host_tasks, "maxHostTasks", service.max_host_tasks);
  p.setMemoryLimitBytes(limits.memory_bytes);
  p.setCpuMillis(limits.cpu_millis);
  p.setMaxProcesses(limits.max_processes);
  p.setMaxHostTasks(limits.max_host_tasks);
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckConfigOwnership(const std::string& dir) {
  std::vector<std::string> paths = {dir, dir + "/helper.json"};
  for (const char* sub : {"/deployments", "/profiles"}) {
    struct stat st;
    if (lstat((dir + sub).c_str(), &st) != 0) continue;
    paths.push_back(dir + sub);
    ASSIGN_OR_RETURN(auto files, JsonFilesIn(dir + sub));
    paths.insert(paths.end(), files.begin(), files.end());
  }
  for (const auto& p : paths) {
    struct stat st;
    if (lstat(p.c_str(), &st) != 0) return ErrnoStatus("stat", p);
    if (S_ISLNK(st.st_mode) || st.st_uid != 0 || (st.st_mode & 022))
      return absl::FailedPreconditionError(
          absl::StrCat(p, ": must be owned by root, not a symlink, and not group/other writable"));
  }
  return absl::OkStatus();
}

const config::Deployment::Reader* Config::FindDeployment(absl::string_view id) const {
  for (const auto& d : deployments_) {
    if (absl::string_view(d.getId().cStr()) == id) return &d;
  }
  return nullptr;
}

const config::LaunchProfile::Reader* Config::FindProfile(absl::string_view name) const {
  for (const auto& p : profiles_) {
    if (absl::string_view(p.getName().cStr()) == name) return &p;
  }
  return nullptr;
}

std::vector<std::string> Config::ProfilesOf(const config::Deployment::Reader& d) const {
  std::vector<std::string> names;
  for (auto n : d.getProfiles()) names.emplace_back(n.cStr());
  if (names.empty()) names.emplace_back("default");
  return names;
}

std::string Config::RootfsPath(const config::LaunchProfile::Reader& profile) const {
  std::string version = profile.getRootfsVersion().size() > 0 ? profile.getRootfsVersion().cStr()
                                                              : helper_.getRootfsVersion().cStr();
  return absl::StrCat(helper_.getStateDir().cStr(), "/rootfs/", version, "/rootfs");
}

std::string Config::AuditPath() const {
  if (helper_.getAudit().getPath().size() > 0) return helper_.getAudit().getPath();
  return absl::StrCat(helper_.getStateDir().cStr(), "/audit/audit.log");
}

std::string Config::BrokerBinary(absl::string_view privhelper_path) const {
  if (helper_.getBrokerBinary().size() > 0) return helper_.getBrokerBinary();
  absl::string_view dir = privhelper_path.substr(0, privhelper_path.rfind('/') + 1);
  return absl::StrCat(dir, "paseo-sandbox-broker");
}

std::string Config::EgressBinary(absl::string_view privhelper_path) const {
  if (helper_.getNetwork().getEgressBinary().size() > 0) return helper_.getNetwork().getEgressBinary();
  absl::string_view dir = privhelper_path.substr(0, privhelper_path.rfind('/') + 1);
  return absl::StrCat(dir, "paseo-sandbox-egress");
}

std::string Config::SandboxShimBinary(absl::string_view privhelper_path) const {
  if (helper_.getSandboxShim().size() > 0) return helper_.getSandboxShim();
  absl::string_view dir = privhelper_path.substr(0, privhelper_path.rfind('/') + 1);
  return absl::StrCat(dir, "paseo-sandbox-shim");
}

bool Config::UsesSandboxNetwork() const {
  for (const auto& p : profiles_) {
    if (p.getNetwork().getMode() == config::NetworkMode::SANDBOX) return true;
  }
  return false;
}

SandboxLimits Config::LimitsOf(const config::LaunchProfile::Reader& profile) const {
  SandboxLimits limits;
  limits.memory_bytes = profile.getMemoryLimitBytes();
  limits.cpu_millis = profile.getCpuMillis();
  limits.max_processes = profile.getMaxProcesses();
  limits.max_host_tasks = profile.getMaxHostTasks();
  return limits;
}

absl::Status Config::ReplaceWith(std::unique_ptr<Config> next) {
  // capnp's structural equality: an explicit default and an omitted field compare equal.
  if (capnp::AnyStruct::Reader(helper_) != capnp::AnyStruct::Reader(next->helper_))
    return absl::FailedPreconditionError(
        "helper.json changed: its settings apply only when the service restarts");
  // Swapping moves whole vectors (their element storage stays where it is), so every reader
  // and pointer into the old generation now lives on in `next`, which is retired, not freed.
  std::swap(host_, next->host_);
  std::swap(service_, next->service_);
  std::swap(messages_, next->messages_);
  std::swap(helper_, next->helper_);
  std::swap(deployments_, next->deployments_);
  std::swap(profiles_, next->profiles_);
  retired_.push_back(std::move(next));
  return absl::OkStatus();
}

bool Config::SameAs(const Config& other) const {
  auto same = [](const auto& a, const auto& b) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i)
      if (capnp::AnyStruct::Reader(a[i]) != capnp::AnyStruct::Reader(b[i])) return false;
    return true;
  };
  return capnp::AnyStruct::Reader(helper_) == capnp::AnyStruct::Reader(other.helper_) &&
         same(deployments_, other.deployments_) && same(profiles_, other.profiles_);
}

absl::StatusOr<std::unique_ptr<Config>> LoadConfig(const std::string& dir) {
  ASSIGN_OR_RETURN(HostResources host, ReadHostResources());
  return LoadConfig(dir, host);
}

absl::StatusOr<std::unique_ptr<Config>> LoadConfig(const std::string& dir,
                                                   const HostResources& host) {
  auto config = std::unique_ptr<Config>(new Config);
  config->host_ = host;
  std::string helper_file = dir + "/helper.json";
  ASSIGN_OR_RETURN(config->helper_,
                   Decode<config::HelperConfig>(helper_file, config->messages_));
  RETURN_IF_ERROR(ValidateHelper(helper_file, config->helper_));
  auto configured = config->helper_.getServiceLimits();
  config->service_ = ResolveServiceBounds(
      {configured.getMemoryBytes(), configured.getCpuMillis(), configured.getMaxHostTasks()}, host);

  ASSIGN_OR_RETURN(auto profile_files, JsonFilesIn(dir + "/profiles"));
  for (const auto& file : profile_files) {
    ASSIGN_OR_RETURN(auto p, Decode<config::LaunchProfile>(file, config->messages_));
    RETURN_IF_ERROR(ValidateProfile(file, p));
    if (config->FindProfile(p.getName().cStr()) != nullptr)
      return Bad(file, "name", absl::StrCat("profile \"", p.getName().cStr(), "\" defined twice"));
    // Decode keeps the profile's message last; its reader sees what is set here.
    RETURN_IF_ERROR(ResolveProfileLimits(
        file, config->messages_.back()->getRoot<config::LaunchProfile>(), config->service_, host));
    config->profiles_.push_back(p);
  }
  if (config->FindProfile("default") == nullptr) {
    // An implicit default profile with the schema's defaults, so a minimal config works.
    auto message = std::make_unique<capnp::MallocMessageBuilder>();
    message->initRoot<config::LaunchProfile>().setName("default");
    RETURN_IF_ERROR(ResolveProfileLimits(dir + "/profiles", message->getRoot<config::LaunchProfile>(),
                                         config->service_, host));
    config->profiles_.push_back(message->getRoot<config::LaunchProfile>().asReader());
    config->messages_.push_back(std::move(message));
  }

  ASSIGN_OR_RETURN(auto deployment_files, JsonFilesIn(dir + "/deployments"));
  for (const auto& file : deployment_files) {
    ASSIGN_OR_RETURN(auto d, Decode<config::Deployment>(file, config->messages_));
    RETURN_IF_ERROR(ValidateDeployment(file, d));
    if (config->FindDeployment(d.getId().cStr()) != nullptr)
      return Bad(file, "id", absl::StrCat("deployment \"", d.getId().cStr(), "\" defined twice"));
    for (const auto& name : config->ProfilesOf(d)) {
      if (config->FindProfile(name) == nullptr)
        return Bad(file, "profiles", absl::StrCat("unknown launch profile \"", name, "\""));
    }
    RETURN_IF_ERROR(CheckToolsRegistered(file, *config, d));
    RETURN_IF_ERROR(CheckSecretsRegistered(file, *config, d));
    config->deployments_.push_back(d);
  }
  if (config->deployments_.empty())
    return absl::InvalidArgumentError(absl::StrCat(dir, "/deployments: no deployment defined"));
  return config;
}

}  // namespace paseo
