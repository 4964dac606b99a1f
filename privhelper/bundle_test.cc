#include "privhelper/bundle.h"

#include <algorithm>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <capnp/compat/json.h>
#include <capnp/message.h>
#include <kj/exception.h>

#include "absl/strings/str_cat.h"
#include "common/search_path.h"
#include "gtest/gtest.h"

namespace paseo {
namespace {

using capnp::JsonValue;

// A decoded JSON document. `root` stays valid as long as the Parsed lives.
struct Parsed {
  capnp::MallocMessageBuilder message;
  JsonValue::Reader root;
  bool ok = false;
};

// Cap'n Proto 0.9.2's JSON parser decodes the hex letters of a \uXXXX escape wrongly ('a'..'f'
// count as 0..5, so "\u000b" becomes 0x01; fixed upstream in capnproto/capnproto#1552). The
// writer's escapes are correct JSON, so decode every \u escape here, correctly, into raw UTF-8
// (or \" / \\) before handing the text to capnp, which accepts raw bytes inside strings.
std::string DecodeUnicodeEscapes(const std::string& text) {
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '\\' || i + 1 >= text.size()) {
      out.push_back(text[i]);
      continue;
    }
    if (text[i + 1] != 'u') {  // any other escape, including "\\", is copied whole
      out.append(text, i, 2);
      ++i;
      continue;
    }
    uint32_t cp = 0;
    bool ok = i + 5 < text.size();
    for (size_t k = i + 2; ok && k < i + 6; ++k) {
      int d = hex(text[k]);
      ok = d >= 0;
      cp = cp * 16 + uint32_t(d);
    }
    if (!ok || (cp >= 0xd800 && cp <= 0xdfff)) {
      ADD_FAILURE() << "unsupported \\u escape at offset " << i;
      out.append(text, i, 2);
      ++i;
      continue;
    }
    if (cp == '"' || cp == '\\') {
      out.push_back('\\');
      out.push_back(char(cp));
    } else if (cp < 0x80) {
      out.push_back(char(cp));
    } else if (cp < 0x800) {
      out.push_back(char(0xc0 | (cp >> 6)));
      out.push_back(char(0x80 | (cp & 0x3f)));
    } else {
      out.push_back(char(0xe0 | (cp >> 12)));
      out.push_back(char(0x80 | ((cp >> 6) & 0x3f)));
      out.push_back(char(0x80 | (cp & 0x3f)));
    }
    i += 5;
  }
  return out;
}

std::unique_ptr<Parsed> Parse(const std::string& rendered) {
  auto p = std::make_unique<Parsed>();
  std::string text = DecodeUnicodeEscapes(rendered);
  capnp::JsonCodec codec;
  auto builder = p->message.initRoot<JsonValue>();
  kj::Maybe<kj::Exception> error = kj::runCatchingExceptions([&] {
    codec.decodeRaw(kj::ArrayPtr<const char>(text.data(), text.size()), builder);
  });
  KJ_IF_MAYBE(e, error) {
    ADD_FAILURE() << "not valid JSON: " << e->getDescription().cStr() << "\n" << text;
    return p;
  }
  p->root = p->message.getRoot<JsonValue>().asReader();
  p->ok = true;
  return p;
}

const char* KindName(JsonValue::Which w) {
  switch (w) {
    case JsonValue::NULL_: return "null";
    case JsonValue::BOOLEAN: return "boolean";
    case JsonValue::NUMBER: return "number";
    case JsonValue::STRING: return "string";
    case JsonValue::ARRAY: return "array";
    case JsonValue::OBJECT: return "object";
    case JsonValue::CALL: return "call";
  }
  return "?";
}

// Number of fields called `name` in an object (0 if `v` is not an object).
int CountField(JsonValue::Reader v, std::string_view name) {
  if (!v.isObject()) return 0;
  int n = 0;
  for (auto f : v.getObject()) n += std::string_view(f.getName().cStr()) == name;
  return n;
}

bool Has(JsonValue::Reader v, std::string_view name) { return CountField(v, name) > 0; }

// The field `name` of object `v`; records a failure (and returns a JSON null) when `v` is not an
// object or does not have exactly one such field.
JsonValue::Reader Field(JsonValue::Reader v, std::string_view name) {
  if (!v.isObject()) {
    ADD_FAILURE() << "looking up \"" << name << "\" in a " << KindName(v.which());
    return JsonValue::Reader();
  }
  int n = CountField(v, name);
  if (n != 1) {
    ADD_FAILURE() << "field \"" << name << "\" appears " << n << " times";
    return JsonValue::Reader();
  }
  for (auto f : v.getObject()) {
    if (std::string_view(f.getName().cStr()) == name) return f.getValue();
  }
  return JsonValue::Reader();
}

// Nested lookup: Get(root, {"process", "user", "uid"}).
JsonValue::Reader Get(JsonValue::Reader v, std::initializer_list<std::string_view> path) {
  for (auto name : path) v = Field(v, name);
  return v;
}

std::string Str(JsonValue::Reader v) {
  if (!v.isString()) {
    ADD_FAILURE() << "expected a string, got a " << KindName(v.which());
    return "<not a string>";
  }
  auto t = v.getString();
  return std::string(t.begin(), t.end());
}

double Num(JsonValue::Reader v) {
  if (!v.isNumber()) {
    ADD_FAILURE() << "expected a number, got a " << KindName(v.which());
    return -12345;
  }
  return v.getNumber();
}

// true/false, or a failure for anything else (returns false).
bool Bool(JsonValue::Reader v) {
  if (!v.isBoolean()) {
    ADD_FAILURE() << "expected a boolean, got a " << KindName(v.which());
    return false;
  }
  return v.getBoolean();
}

std::vector<JsonValue::Reader> Array(JsonValue::Reader v) {
  std::vector<JsonValue::Reader> out;
  if (!v.isArray()) {
    ADD_FAILURE() << "expected an array, got a " << KindName(v.which());
    return out;
  }
  for (auto e : v.getArray()) out.push_back(e);
  return out;
}

std::vector<std::string> Strings(JsonValue::Reader v) {
  std::vector<std::string> out;
  for (auto e : Array(v)) out.push_back(Str(e));
  return out;
}

std::vector<std::string> Keys(JsonValue::Reader v) {
  std::vector<std::string> out;
  if (v.isObject()) {
    for (auto f : v.getObject()) out.emplace_back(f.getName().cStr());
  }
  return out;
}

bool Contains(const std::vector<std::string>& v, std::string_view s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

// Every object in the document has distinct keys (Go's decoder would silently take the last).
void ExpectNoDuplicateKeys(JsonValue::Reader v, const std::string& where = "$") {
  if (v.isObject()) {
    std::set<std::string> seen;
    for (auto f : v.getObject()) {
      std::string name = f.getName().cStr();
      EXPECT_TRUE(seen.insert(name).second) << "duplicate key " << where << "." << name;
      ExpectNoDuplicateKeys(f.getValue(), where + "." + name);
    }
  } else if (v.isArray()) {
    int i = 0;
    for (auto e : v.getArray()) ExpectNoDuplicateKeys(e, where + "[" + std::to_string(i++) + "]");
  }
}

// The rendered text has no raw control bytes: JSON requires them escaped inside strings.
void ExpectNoRawControlBytes(const std::string& text) {
  for (size_t i = 0; i < text.size(); ++i) {
    unsigned char c = static_cast<unsigned char>(text[i]);
    EXPECT_GE(c, 0x20) << "raw control byte " << int(c) << " at offset " << i;
    if (c < 0x20) return;
  }
}

void ExpectNoCapabilities(JsonValue::Reader process) {
  JsonValue::Reader caps = Field(process, "capabilities");
  ASSERT_TRUE(caps.isObject()) << KindName(caps.which());
  for (const char* set : {"bounding", "effective", "inheritable", "permitted", "ambient"}) {
    SCOPED_TRACE(set);
    JsonValue::Reader list = Field(caps, set);
    ASSERT_TRUE(list.isArray()) << KindName(list.which());
    EXPECT_EQ(list.getArray().size(), 0u);
  }
  // No other set sneaks in with contents either.
  for (auto f : caps.getObject()) {
    EXPECT_TRUE(f.getValue().isArray() && f.getValue().getArray().size() == 0)
        << "capability set " << f.getName().cStr() << " is not an empty list";
  }
  EXPECT_TRUE(Bool(Field(process, "noNewPrivileges")));
}

void ExpectUser(JsonValue::Reader process, uint32_t uid, uint32_t gid) {
  JsonValue::Reader user = Field(process, "user");
  EXPECT_EQ(Num(Field(user, "uid")), double(uid));
  EXPECT_EQ(Num(Field(user, "gid")), double(gid));
  // Supplementary groups, when present, add nothing beyond the primary group.
  if (Has(user, "additionalGids")) {
    for (auto g : Array(Field(user, "additionalGids"))) EXPECT_EQ(Num(g), double(gid));
  }
}

BundleSpec TypicalBundle() {
  BundleSpec spec;
  spec.rootfs = "/var/lib/paseo-sandbox/rootfs/v1/rootfs";
  spec.hostname = "sb-1234";
  spec.uid = 1000;
  spec.gid = 1001;
  spec.mounts = {
      {"/var/lib/paseo-sandbox/bundles/sb-1234/mounts/0", "/workspace", false},
      {"/var/lib/paseo-sandbox/bundles/sb-1234/mounts/1", "/home/agent/.config/creds", true},
  };
  spec.tmpfs_bytes = 128ull << 20;
  spec.limits.memory_bytes = 6ull << 30;
  spec.limits.cpu_millis = 1000;
  spec.limits.max_processes = 512;
  spec.limits.max_host_tasks = 8192;
  spec.shim = "/run/paseo-sandbox/paseo-sandbox-shim";
  return spec;
}

// The mount entries of an OCI config, by destination; fails on a repeated destination.
std::map<std::string, JsonValue::Reader> MountsByDestination(JsonValue::Reader root) {
  std::map<std::string, JsonValue::Reader> out;
  for (auto m : Array(Field(root, "mounts"))) {
    std::string dest = Str(Field(m, "destination"));
    EXPECT_TRUE(out.emplace(dest, m).second) << "mount destination repeated: " << dest;
  }
  return out;
}

TEST(RenderOciConfigTest, IsValidJsonWithoutDuplicateKeysOrRawControlBytes) {
  std::string text = RenderOciConfig(TypicalBundle());
  auto doc = Parse(text);
  ASSERT_TRUE(doc->ok);
  ASSERT_TRUE(doc->root.isObject());
  ExpectNoDuplicateKeys(doc->root);
  ExpectNoRawControlBytes(text);
}

TEST(RenderOciConfigTest, ProcessRunsInitAsTheDeploymentUserWithNoPrivileges) {
  BundleSpec spec = TypicalBundle();
  auto doc = Parse(RenderOciConfig(spec));
  ASSERT_TRUE(doc->ok);
  EXPECT_EQ(Str(Field(doc->root, "ociVersion")), "1.0.2");

  JsonValue::Reader process = Field(doc->root, "process");
  ASSERT_TRUE(process.isObject());
  ExpectUser(process, 1000, 1001);
  EXPECT_FALSE(Bool(Field(process, "terminal")));
  EXPECT_EQ(Strings(Field(process, "args")), SandboxInitArgv(false));
  EXPECT_EQ(Strings(Field(process, "env")), ProcessEnv({}));
  EXPECT_EQ(Str(Field(process, "cwd")), "/");
  ExpectNoCapabilities(process);

  // The file-descriptor limit is set.
  bool nofile = false;
  for (auto r : Array(Field(process, "rlimits"))) {
    if (Str(Field(r, "type")) == "RLIMIT_NOFILE") {
      nofile = true;
      EXPECT_GT(Num(Field(r, "hard")), 0);
      EXPECT_LE(Num(Field(r, "soft")), Num(Field(r, "hard")));
    }
  }
  EXPECT_TRUE(nofile);
}

TEST(RenderOciConfigTest, UserIdsAreRenderedExactly) {
  for (auto [uid, gid] : std::vector<std::pair<uint32_t, uint32_t>>{
           {1, 1}, {65534, 65534}, {100000, 200000}, {4294967294u, 4294967294u}}) {
    BundleSpec spec = TypicalBundle();
    spec.uid = uid;
    spec.gid = gid;
    auto doc = Parse(RenderOciConfig(spec));
    ASSERT_TRUE(doc->ok);
    SCOPED_TRACE(uid);
    ExpectUser(Field(doc->root, "process"), uid, gid);
  }
}

TEST(SandboxInitArgvTest, IsTheShimsInit) {
  EXPECT_EQ(SandboxInitArgv(false), (std::vector<std::string>{"/.paseo/shim", "init"}));
  EXPECT_EQ(SandboxInitArgv(true), (std::vector<std::string>{"/.paseo/shim", "spawner", "--init"}));
}

TEST(RenderOciConfigTest, TheShimIsMountedReadOnlyFromTheHostCopy) {
  auto doc = Parse(RenderOciConfig(TypicalBundle()));
  ASSERT_TRUE(doc->ok);
  auto mounts = MountsByDestination(doc->root);
  ASSERT_EQ(mounts.count(kShimPath), 1u);
  JsonValue::Reader m = mounts.at(kShimPath);
  EXPECT_EQ(Str(Field(m, "type")), "bind");
  EXPECT_EQ(Str(Field(m, "source")), "/run/paseo-sandbox/paseo-sandbox-shim");
  EXPECT_EQ(Strings(Field(m, "options")),
            (std::vector<std::string>{"bind", "ro", "nosuid", "nodev"}));
}

TEST(TtyArgvTest, RunsTheProgramThroughTheShimsRelay) {
  EXPECT_EQ(TtyArgv(24, 80, {"sh", "-c", "x"}),
            (std::vector<std::string>{"/.paseo/shim", "tty", "24", "80", "sh", "-c", "x"}));
}

TEST(ShimExecArgvTest, WhatRunscWouldAddIsUnsetByTheShim) {
  EXPECT_EQ(ShimExecArgv({"PATH=/bin", "HOME=/home/a"}, {"env"}, "/bin", true, false),
            (std::vector<std::string>{"env"}));
  EXPECT_EQ(ShimExecArgv({"PATH=/bin", "HOMEDIR=/x"}, {"env", "-0"}, "/bin", true, false),
            (std::vector<std::string>{"/.paseo/shim", "exec", "--unset=HOME", "--", "env", "-0"}));
  EXPECT_EQ(ShimExecArgv({"HOME=/h"}, {"env"}, "/d", true, false),
            (std::vector<std::string>{"/.paseo/shim", "exec", "--unset=PATH", "--", "env"}));
  EXPECT_EQ(ShimExecArgv({}, {"-dash"}, "/d", true, false),
            (std::vector<std::string>{"/.paseo/shim", "exec", "--unset=HOME", "--unset=PATH", "--",
                                      "-dash"}));
}

TEST(ShimExecArgvTest, WithoutAnExactEnvOrAReportTheProgramRunsAsItIs) {
  EXPECT_EQ(ShimExecArgv({}, {"true"}, "/opt/t:/bin", false, false),
            (std::vector<std::string>{"true"}));
  // The spawner adds no HOME and looks up in the search path itself.
  EXPECT_EQ(ShimExecArgv({}, {"true"}, "/opt/t:/bin", true, false, /*runsc_exec=*/false),
            (std::vector<std::string>{"true"}));
  EXPECT_TRUE(ShimEnv({"true"}, "/opt/t:/bin", false).empty());
}

TEST(ShimExecArgvTest, TheNotKeptReportRunsTheProgramUnderTheShim) {
  auto argv = ShimExecArgv({"PATH=/bin"}, {"make"}, "/opt/t:/bin", false, true, false);
  EXPECT_EQ(argv, (std::vector<std::string>{"/.paseo/shim", "exec", "--", "make"}));
  EXPECT_EQ(ShimEnv(argv, "/opt/t:/bin", true),
            (std::vector<std::string>{"PASEO_SHIM_SEARCH_PATH=/opt/t:/bin",
                                      "PASEO_SHIM_REPORT_UNKEPT=1"}));
}

// Issue 26: Paseo checks that a workload's env is exactly the envelope's, with tool roots
// registered; the tools are found through the search path instead (runsc's own lookup would
// use env's PATH, which lacks them). The shim is told it through its environment, which it
// empties again, so that a kept sandbox's older shim still runs the command.
TEST(ShimExecArgvTest, ToolDirectoriesOutsideThePathGoThroughTheShimsLookup) {
  auto argv = ShimExecArgv({"PATH=/bin", "HOME=/h"}, {"paseo-workspace-helper"}, "/opt/t:/bin",
                           true, false);
  EXPECT_EQ(argv, (std::vector<std::string>{"/.paseo/shim", "exec", "--",
                                            "paseo-workspace-helper"}));
  EXPECT_EQ(ShimEnv(argv, "/opt/t:/bin", false),
            (std::vector<std::string>{"PASEO_SHIM_SEARCH_PATH=/opt/t:/bin",
                                      "PASEO_SHIM_REPORT_UNKEPT=0"}));
  EXPECT_EQ(ShimEnv(TtyArgv(24, 80, {"sh"}), "/opt/t:/bin", false),
            (std::vector<std::string>{"PASEO_SHIM_SEARCH_PATH=/opt/t:/bin",
                                      "PASEO_SHIM_REPORT_UNKEPT=0"}));
}

TEST(ProcessEnvTest, AnExactEnvironmentIsPassedThroughUnchangedEvenWithTools) {
  EXPECT_EQ(ProcessEnv({}, /*tty=*/true, {"/opt/tools"}, /*exact=*/true),
            std::vector<std::string>{});
  EXPECT_EQ(ProcessEnv({"PATH=/bin", "A=b"}, /*tty=*/true, {"/opt/tools"}, /*exact=*/true),
            (std::vector<std::string>{"PATH=/bin", "A=b"}));
  std::vector<std::string> defaults = ProcessEnv({}, /*tty=*/true);
  EXPECT_EQ(defaults.size(), 2u) << "a default PATH and TERM unless exact";
  EXPECT_EQ(defaults[0], std::string("PATH=") + kDefaultSearchPath);
}

TEST(RenderOciConfigTest, RootIsTheReadOnlyRootfs) {
  BundleSpec spec = TypicalBundle();
  auto doc = Parse(RenderOciConfig(spec));
  ASSERT_TRUE(doc->ok);
  JsonValue::Reader root = Field(doc->root, "root");
  EXPECT_EQ(Str(Field(root, "path")), spec.rootfs);
  EXPECT_TRUE(Bool(Field(root, "readonly")));
  EXPECT_EQ(Str(Field(doc->root, "hostname")), "sb-1234");
}

TEST(RenderOciConfigTest, BaseMountsAndSizedTmp) {
  BundleSpec spec = TypicalBundle();
  auto doc = Parse(RenderOciConfig(spec));
  ASSERT_TRUE(doc->ok);
  auto mounts = MountsByDestination(doc->root);

  ASSERT_EQ(mounts.count("/proc"), 1u);
  EXPECT_EQ(Str(Field(mounts["/proc"], "type")), "proc");

  ASSERT_EQ(mounts.count("/tmp"), 1u);
  JsonValue::Reader tmp = mounts["/tmp"];
  EXPECT_EQ(Str(Field(tmp, "type")), "tmpfs");
  std::vector<std::string> options = Strings(Field(tmp, "options"));
  EXPECT_TRUE(Contains(options, "size=134217728")) << ::testing::PrintToString(options);
  EXPECT_TRUE(Contains(options, "nosuid"));
  EXPECT_TRUE(Contains(options, "nodev"));
  // Exactly one size option.
  EXPECT_EQ(std::count_if(options.begin(), options.end(),
                          [](const std::string& o) { return o.rfind("size=", 0) == 0; }),
            1);

  spec.tmpfs_bytes = 1ull << 20;
  auto doc2 = Parse(RenderOciConfig(spec));
  ASSERT_TRUE(doc2->ok);
  auto mounts2 = MountsByDestination(doc2->root);
  EXPECT_TRUE(Contains(Strings(Field(mounts2["/tmp"], "options")), "size=1048576"));
}

TEST(RenderOciConfigTest, StagedMountsAreNonRecursiveBindsOfTheStagingPaths) {
  BundleSpec spec = TypicalBundle();
  auto doc = Parse(RenderOciConfig(spec));
  ASSERT_TRUE(doc->ok);
  auto mounts = MountsByDestination(doc->root);

  for (const StagedMount& staged : spec.mounts) {
    SCOPED_TRACE(staged.destination);
    ASSERT_EQ(mounts.count(staged.destination), 1u);
    JsonValue::Reader m = mounts[staged.destination];
    EXPECT_EQ(Str(Field(m, "type")), "bind");
    EXPECT_EQ(Str(Field(m, "source")), staged.source);
    std::vector<std::string> options = Strings(Field(m, "options"));
    SCOPED_TRACE(::testing::PrintToString(options));
    EXPECT_TRUE(Contains(options, staged.read_only ? "ro" : "rw"));
    EXPECT_FALSE(Contains(options, staged.read_only ? "rw" : "ro"));
    EXPECT_TRUE(Contains(options, "nosuid"));
    EXPECT_TRUE(Contains(options, "nodev"));
    EXPECT_FALSE(Contains(options, "rbind"));
  }

  // The staged mounts and the shim are the only binds, and they follow every base mount (so a
  // staged mount beneath /tmp is not hidden by the tmpfs).
  auto all = Array(Field(doc->root, "mounts"));
  size_t binds = 0;
  size_t last_base = 0, first_bind = all.size();
  for (size_t i = 0; i < all.size(); ++i) {
    std::string type = Str(Field(all[i], "type"));
    std::vector<std::string> options = Strings(Field(all[i], "options"));
    bool is_bind = type == "bind" || Contains(options, "bind") || Contains(options, "rbind");
    if (is_bind) {
      ++binds;
      first_bind = std::min(first_bind, i);
    } else {
      last_base = i;
    }
  }
  EXPECT_EQ(binds, spec.mounts.size() + 1);
  EXPECT_LT(last_base, first_bind);
}

// A profile's tools are staged like workspaces and always read-only (sandbox_host.cc
// WriteBundle): they render as ro, nosuid, nodev binds of their staging dirs, after every base
// mount and in the order given (workspaces, credentials, then tools).
TEST(RenderOciConfigTest, ToolMountsAreReadOnlyNosuidNodevBindsAfterTheBaseMounts) {
  BundleSpec spec = TypicalBundle();
  spec.mounts.push_back({"/bundle/mounts/tool-paseo-helper", "/opt/paseo/bin", true});
  spec.mounts.push_back({"/bundle/mounts/tool-node", "/opt/node/bin", true});
  auto doc = Parse(RenderOciConfig(spec));
  ASSERT_TRUE(doc->ok);
  auto all = Array(Field(doc->root, "mounts"));
  std::vector<std::string> order;
  size_t last_base = 0;
  for (size_t i = 0; i < all.size(); ++i) {
    order.push_back(Str(Field(all[i], "destination")));
    if (Str(Field(all[i], "type")) != "bind") last_base = i;
  }
  auto at = [&order](const std::string& d) {
    return static_cast<size_t>(std::find(order.begin(), order.end(), d) - order.begin());
  };
  ASSERT_LT(at("/opt/paseo/bin"), order.size());
  ASSERT_LT(at("/opt/node/bin"), order.size());
  EXPECT_LT(last_base, at("/opt/paseo/bin"));
  EXPECT_LT(at(spec.mounts[0].destination), at("/opt/paseo/bin"));
  EXPECT_LT(at("/opt/paseo/bin"), at("/opt/node/bin"));
  auto mounts = MountsByDestination(doc->root);
  for (const char* tool : {"/opt/paseo/bin", "/opt/node/bin"}) {
    SCOPED_TRACE(tool);
    std::vector<std::string> options = Strings(Field(mounts[tool], "options"));
    EXPECT_EQ(Str(Field(mounts[tool], "type")), "bind");
    EXPECT_TRUE(Contains(options, "ro"));
    EXPECT_FALSE(Contains(options, "rw"));
    EXPECT_TRUE(Contains(options, "nosuid"));
    EXPECT_TRUE(Contains(options, "nodev"));
    EXPECT_FALSE(Contains(options, "rbind"));
  }
  EXPECT_EQ(Str(Field(mounts["/opt/node/bin"], "source")), "/bundle/mounts/tool-node");
}

TEST(RenderOciConfigTest, NoStagedMountsMeansNoBindsBesidesTheShim) {
  BundleSpec spec = TypicalBundle();
  spec.mounts.clear();
  auto doc = Parse(RenderOciConfig(spec));
  ASSERT_TRUE(doc->ok);
  for (auto m : Array(Field(doc->root, "mounts"))) {
    if (Str(Field(m, "destination")) == kShimPath) continue;
    EXPECT_NE(Str(Field(m, "type")), "bind") << Str(Field(m, "destination"));
  }
}

TEST(RenderOciConfigTest, FreshNamespacesAndMaskedPaths) {
  auto doc = Parse(RenderOciConfig(TypicalBundle()));
  ASSERT_TRUE(doc->ok);
  JsonValue::Reader linux_ = Field(doc->root, "linux");
  std::vector<std::string> types;
  for (auto ns : Array(Field(linux_, "namespaces"))) {
    types.push_back(Str(Field(ns, "type")));
    // A path would join an existing (host) namespace instead of creating one.
    EXPECT_FALSE(Has(ns, "path")) << types.back();
  }
  for (const char* want : {"pid", "ipc", "uts", "mount", "network"}) {
    EXPECT_TRUE(Contains(types, want)) << want << " in " << ::testing::PrintToString(types);
  }
  std::vector<std::string> masked = Strings(Field(linux_, "maskedPaths"));
  EXPECT_TRUE(Contains(masked, "/proc/kcore")) << ::testing::PrintToString(masked);
  EXPECT_TRUE(Contains(masked, "/proc/keys"));
  EXPECT_TRUE(Contains(masked, "/sys/firmware"));
  std::vector<std::string> readonly = Strings(Field(linux_, "readonlyPaths"));
  EXPECT_TRUE(Contains(readonly, "/proc/sys")) << ::testing::PrintToString(readonly);
  EXPECT_TRUE(Contains(readonly, "/proc/sysrq-trigger"));
}

TEST(RenderOciConfigTest, SandboxNetworkJoinsOnlyItsPinnedNetworkNamespace) {
  BundleSpec spec = TypicalBundle();
  spec.netns_path = "/run/paseo-sandbox/netns/sb-1";
  auto doc = Parse(RenderOciConfig(spec));
  ASSERT_TRUE(doc->ok);
  int with_path = 0;
  for (auto ns : Array(Field(Field(doc->root, "linux"), "namespaces"))) {
    if (!Has(ns, "path")) continue;
    ++with_path;
    EXPECT_EQ(Str(Field(ns, "type")), "network");
    EXPECT_EQ(Str(Field(ns, "path")), "/run/paseo-sandbox/netns/sb-1");
  }
  EXPECT_EQ(with_path, 1);
}

// The rlimit of `type` in a process object; fails the test if it is missing or repeated.
struct Rlimit {
  double soft = -1;
  double hard = -1;
  int count = 0;
};
Rlimit FindRlimit(JsonValue::Reader process, const std::string& type) {
  Rlimit r;
  for (auto l : Array(Field(process, "rlimits"))) {
    if (Str(Field(l, "type")) != type) continue;
    ++r.count;
    r.soft = Num(Field(l, "soft"));
    r.hard = Num(Field(l, "hard"));
  }
  return r;
}

TEST(RenderOciConfigTest, EveryBoundIsRendered) {
  BundleSpec spec = TypicalBundle();
  auto doc = Parse(RenderOciConfig(spec));
  ASSERT_TRUE(doc->ok);
  JsonValue::Reader resources = Get(doc->root, {"linux", "resources"});
  EXPECT_EQ(Num(Get(resources, {"memory", "limit"})), double(6ull << 30));
  // One CPU: a quota of one period.
  EXPECT_EQ(Num(Get(resources, {"cpu", "quota"})), 100000.0);
  EXPECT_EQ(Num(Get(resources, {"cpu", "period"})), 100000.0);
  // Every sandbox starts at the base weight (cpu_priority.h).
  EXPECT_EQ(Num(Get(resources, {"cpu", "shares"})), double(kBaseCpuShares));
  EXPECT_EQ(Num(Get(resources, {"pids", "limit"})), 8192.0);
  // Soft and hard alike: without CAP_SYS_RESOURCE the agent cannot raise either.
  Rlimit nproc = FindRlimit(Field(doc->root, "process"), "RLIMIT_NPROC");
  EXPECT_EQ(nproc.count, 1);
  EXPECT_EQ(nproc.soft, 512.0);
  EXPECT_EQ(nproc.hard, 512.0);
  Rlimit nofile = FindRlimit(Field(doc->root, "process"), "RLIMIT_NOFILE");
  EXPECT_EQ(nofile.count, 1);
  EXPECT_EQ(nofile.hard, 65536.0);
}

TEST(RenderOciConfigTest, BoundsAreRenderedExactly) {
  BundleSpec spec = TypicalBundle();
  for (uint32_t millis : {10u, 250u, 1500u, 1024000u}) {
    SCOPED_TRACE(millis);
    spec.limits.cpu_millis = millis;
    auto doc = Parse(RenderOciConfig(spec));
    ASSERT_TRUE(doc->ok);
    EXPECT_EQ(Num(Get(doc->root, {"linux", "resources", "cpu", "quota"})), millis * 100.0);
    EXPECT_EQ(Num(Get(doc->root, {"linux", "resources", "cpu", "period"})), 100000.0);
  }
  for (uint64_t limit : {uint64_t{64} << 20, uint64_t{512} << 20, uint64_t{1} << 50}) {
    SCOPED_TRACE(limit);
    spec.limits.memory_bytes = limit;
    auto doc = Parse(RenderOciConfig(spec));
    ASSERT_TRUE(doc->ok);
    EXPECT_EQ(Num(Get(doc->root, {"linux", "resources", "memory", "limit"})), double(limit));
  }
  for (uint32_t n : {16u, 4096u, 1u << 22}) {
    SCOPED_TRACE(n);
    spec.limits.max_processes = n;
    spec.limits.max_host_tasks = n + 1;
    auto doc = Parse(RenderOciConfig(spec));
    ASSERT_TRUE(doc->ok);
    EXPECT_EQ(FindRlimit(Field(doc->root, "process"), "RLIMIT_NPROC").hard, double(n));
    EXPECT_EQ(Num(Get(doc->root, {"linux", "resources", "pids", "limit"})), double(n + 1));
  }
}

TEST(RenderOciConfigTest, AZeroBoundIsLeftOut) {
  BundleSpec spec = TypicalBundle();
  spec.limits = {};
  auto doc = Parse(RenderOciConfig(spec));
  ASSERT_TRUE(doc->ok);
  JsonValue::Reader resources = Get(doc->root, {"linux", "resources"});
  for (const char* r : {"memory", "pids"}) EXPECT_FALSE(Has(resources, r)) << r;
  // The CPU weight stays: it bounds nothing.
  JsonValue::Reader cpu = Get(resources, {"cpu"});
  EXPECT_FALSE(Has(cpu, "quota"));
  EXPECT_FALSE(Has(cpu, "period"));
  EXPECT_EQ(Num(Get(cpu, {"shares"})), double(kBaseCpuShares));
  EXPECT_EQ(FindRlimit(Field(doc->root, "process"), "RLIMIT_NPROC").count, 0);
}

// Strings that break naive JSON writers.
std::vector<std::string> NastyStrings() {
  std::string all_controls;
  for (int c = 1; c < 0x20; ++c) all_controls.push_back(static_cast<char>(c));
  return {
      "",
      "plain",
      "with \"quotes\"",
      "back\\slash",
      "\\\"",
      "\\",
      "\"",
      "trailing backslash\\",
      "line1\nline2",
      "tab\there",
      "cr\rlf\n",
      all_controls,
      "\x7f del",
      "\\u0041 literal escape",
      "\\n not a newline",
      "caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x98\x80",
      "\", \"uid\": 0, \"x\": \"",
      "}]}",
      "/bin/sh",
  };
}

TEST(RenderProcessJsonTest, FieldsAreRenderedFromTheSpec) {
  ExecSpec spec;
  spec.argv = {"/bin/sh", "-c", "echo hi"};
  spec.env = {"HOME=/home/agent", "TERM=xterm"};
  spec.cwd = "/workspace/project";
  spec.uid = 1000;
  spec.gid = 1000;
  std::string text = RenderProcessJson(spec);
  auto doc = Parse(text);
  ASSERT_TRUE(doc->ok);
  ExpectNoDuplicateKeys(doc->root);
  ExpectNoRawControlBytes(text);

  EXPECT_EQ(Strings(Field(doc->root, "args")), spec.argv);
  EXPECT_EQ(Strings(Field(doc->root, "env")), ProcessEnv(spec.env));
  EXPECT_EQ(Str(Field(doc->root, "cwd")), "/workspace/project");
  EXPECT_FALSE(Bool(Field(doc->root, "terminal")));
  ExpectUser(doc->root, 1000, 1000);
  ExpectNoCapabilities(doc->root);
  // RLIMIT_NPROC is left to the container's (inherited, and never raised by an exec).
  EXPECT_EQ(FindRlimit(doc->root, "RLIMIT_NPROC").count, 0);
  EXPECT_EQ(FindRlimit(doc->root, "RLIMIT_NOFILE").count, 1);
}

TEST(RenderProcessJsonTest, NastyStringsRoundTripExactly) {
  ExecSpec spec;
  spec.argv = NastyStrings();
  for (const auto& s : NastyStrings()) spec.env.push_back("V=" + s);
  spec.env.push_back("PATH=/opt/\"x\"\\bin\n");
  spec.cwd = "/work\"space\\with\nnewline";
  spec.uid = 1234;
  spec.gid = 5678;

  std::string text = RenderProcessJson(spec);
  ExpectNoRawControlBytes(text);
  auto doc = Parse(text);
  ASSERT_TRUE(doc->ok);

  std::vector<std::string> args = Strings(Field(doc->root, "args"));
  ASSERT_EQ(args.size(), spec.argv.size());
  for (size_t i = 0; i < args.size(); ++i) {
    EXPECT_EQ(args[i], spec.argv[i]) << "argv[" << i << "]";
  }
  EXPECT_EQ(Strings(Field(doc->root, "env")), spec.env);  // PATH given: nothing added
  EXPECT_EQ(Str(Field(doc->root, "cwd")), spec.cwd);
  // The injection attempt in argv did not create or override any field.
  ExpectUser(doc->root, 1234, 5678);
  std::vector<std::string> keys = Keys(doc->root);
  std::sort(keys.begin(), keys.end());
  EXPECT_EQ(keys, (std::vector<std::string>{"args", "capabilities", "cwd", "env",
                                            "noNewPrivileges", "rlimits", "terminal", "user"}));
  ExpectNoDuplicateKeys(doc->root);
}

TEST(RenderOciConfigTest, NastyStringsRoundTripExactly) {
  for (const auto& s : NastyStrings()) {
    SCOPED_TRACE(::testing::PrintToString(s));
    BundleSpec spec = TypicalBundle();
    spec.rootfs = "/rootfs/" + s;
    spec.hostname = s;
    spec.mounts = {{"/staging/" + s, "/dest/" + s, true}};
    std::string text = RenderOciConfig(spec);
    ExpectNoRawControlBytes(text);
    auto doc = Parse(text);
    ASSERT_TRUE(doc->ok);
    EXPECT_EQ(Str(Get(doc->root, {"root", "path"})), spec.rootfs);
    EXPECT_EQ(Str(Field(doc->root, "hostname")), spec.hostname);
    auto mounts = MountsByDestination(doc->root);
    ASSERT_EQ(mounts.count("/dest/" + s), 1u);
    EXPECT_EQ(Str(Field(mounts["/dest/" + s], "source")), "/staging/" + s);
    ExpectUser(Field(doc->root, "process"), 1000, 1001);
    ExpectNoDuplicateKeys(doc->root);
  }
}

// The test's own escape decoding (see DecodeUnicodeEscapes) is right, or the round trips above
// prove nothing.
TEST(JsonTestHelperTest, DecodesUnicodeEscapesCorrectly) {
  auto doc = Parse(R"(["\u000b\u001F", "caf\u00e9", "\\u0041", "\u0022\u005c", "\u20AC"])");
  ASSERT_TRUE(doc->ok);
  EXPECT_EQ(Strings(doc->root), (std::vector<std::string>{"\x0b\x1f", "caf\xc3\xa9", "\\u0041",
                                                          "\"\\", "\xe2\x82\xac"}));
}

// The writer escapes control bytes with the standard JSON escapes.
TEST(RenderProcessJsonTest, ControlBytesUseStandardEscapes) {
  ExecSpec spec;
  spec.argv = {"a\x01\x0b\x1f\n\"\\z"};
  std::string text = RenderProcessJson(spec);
  EXPECT_NE(text.find(R"("a\u0001\u000b\u001f\n\"\\z")"), std::string::npos) << text;
}

bool IsPath(const std::string& e) { return e.rfind("PATH=", 0) == 0; }

TEST(ProcessEnvTest, ATerminalGetsTermUnlessGivenOne) {
  auto env = ProcessEnv({"A=1"}, /*tty=*/true);
  EXPECT_NE(std::find(env.begin(), env.end(), "TERM=xterm"), env.end());
  env = ProcessEnv({"TERM=dumb"}, /*tty=*/true);
  EXPECT_EQ(std::find(env.begin(), env.end(), "TERM=xterm"), env.end());
  env = ProcessEnv({}, /*tty=*/false);
  EXPECT_EQ(std::find(env.begin(), env.end(), "TERM=xterm"), env.end());
}

TEST(ProcessEnvTest, AddsDefaultPathOnlyWhenMissing) {
  std::vector<std::string> empty = ProcessEnv({});
  ASSERT_EQ(empty.size(), 1u);
  ASSERT_TRUE(IsPath(empty[0])) << empty[0];
  std::string default_path = empty[0];
  for (const char* dir : {"/usr/bin", "/bin", "/usr/local/bin"}) {
    EXPECT_TRUE((default_path + ":").find(std::string(dir) + ":") != std::string::npos)
        << dir << " not in " << default_path;
  }

  std::vector<std::string> with_home = ProcessEnv({"HOME=/home/agent", "LANG=C.UTF-8"});
  EXPECT_EQ(with_home.size(), 3u);
  EXPECT_EQ(std::count_if(with_home.begin(), with_home.end(), IsPath), 1);
  EXPECT_TRUE(Contains(with_home, default_path));
  EXPECT_TRUE(Contains(with_home, "HOME=/home/agent"));
  EXPECT_TRUE(Contains(with_home, "LANG=C.UTF-8"));
  // The caller's entries keep their order.
  auto home = std::find(with_home.begin(), with_home.end(), "HOME=/home/agent");
  auto lang = std::find(with_home.begin(), with_home.end(), "LANG=C.UTF-8");
  EXPECT_LT(home, lang);

  // Names that merely contain PATH do not count as PATH.
  for (const char* not_path : {"MYPATH=/x", "PATHEXT=.sh", "LD_LIBRARY_PATH=/lib", "path=/x"}) {
    std::vector<std::string> env = ProcessEnv({not_path});
    EXPECT_EQ(env.size(), 2u) << not_path;
    EXPECT_TRUE(Contains(env, default_path)) << not_path;
    EXPECT_TRUE(Contains(env, not_path));
  }

  // A given PATH replaces the default: exactly the caller's env, one PATH.
  std::vector<std::string> given = {"HOME=/h", "PATH=/opt/bin", "X=1"};
  std::vector<std::string> env = ProcessEnv(given);
  EXPECT_EQ(env, given);
  EXPECT_EQ(std::count_if(env.begin(), env.end(), IsPath), 1);

  std::vector<std::string> empty_path = ProcessEnv({"PATH="});
  EXPECT_EQ(empty_path, std::vector<std::string>{"PATH="});
}

TEST(ProcessEnvTest, ToolDirectoriesGoInFrontOfPathInOrder) {
  const std::vector<std::string> tools = {"/opt/paseo/bin", "/opt/node/bin"};
  std::string default_path = ProcessEnv({})[0];
  // No PATH from the client: in front of the default one.
  auto env = ProcessEnv({"HOME=/h"}, /*tty=*/false, tools);
  EXPECT_EQ(env, (std::vector<std::string>{
                     "PATH=/opt/paseo/bin:/opt/node/bin:" + default_path.substr(5), "HOME=/h"}));
  // The client's PATH: in front of it, and nothing else changes.
  env = ProcessEnv({"PATH=/usr/bin:/bin", "X=1"}, /*tty=*/false, tools);
  EXPECT_EQ(env, (std::vector<std::string>{"PATH=/opt/paseo/bin:/opt/node/bin:/usr/bin:/bin",
                                           "X=1"}));
  // A terminal too (the relay execvp()s with this PATH).
  env = ProcessEnv({"PATH=/bin"}, /*tty=*/true, tools);
  EXPECT_TRUE(Contains(env, "PATH=/opt/paseo/bin:/opt/node/bin:/bin"));
  EXPECT_TRUE(Contains(env, "TERM=xterm"));
  // An empty PATH gets no trailing ':' (PATH would read it as the working directory).
  EXPECT_EQ(ProcessEnv({"PATH="}, false, tools),
            std::vector<std::string>{"PATH=/opt/paseo/bin:/opt/node/bin"});
  // Every PATH entry, so which one a libc reads makes no difference.
  env = ProcessEnv({"PATH=/a", "PATH=/b"}, false, {"/t"});
  EXPECT_EQ(env, (std::vector<std::string>{"PATH=/t:/a", "PATH=/t:/b"}));
  // No tools: exactly as before.
  EXPECT_EQ(ProcessEnv({"PATH=/a"}, false, {}), std::vector<std::string>{"PATH=/a"});
}

// The agent's home (LaunchProfile.homePath): gVisor's tmpfs, the agent's own and private from
// the start, bounded, and mounted before every bind so a credential beneath it (TypicalBundle
// places one at /home/agent/.config/creds) is not hidden by it.
TEST(RenderOciConfigTest, TheHomeIsTheAgentsBoundedTmpfsMountedBeforeEveryBind) {
  BundleSpec spec = TypicalBundle();
  spec.home = "/home/agent";
  spec.home_bytes = 3u << 20;
  auto doc = Parse(RenderOciConfig(spec));
  ASSERT_TRUE(doc->ok);
  auto all = Array(Field(doc->root, "mounts"));
  size_t home_at = all.size(), first_bind = all.size(), homes = 0;
  for (size_t i = 0; i < all.size(); ++i) {
    std::string dest = Str(Field(all[i], "destination"));
    if (dest == "/home/agent") home_at = i, ++homes;
    if (Str(Field(all[i], "type")) == "bind") first_bind = std::min(first_bind, i);
  }
  ASSERT_EQ(homes, 1u);
  EXPECT_LT(home_at, first_bind);
  JsonValue::Reader home = all[home_at];
  EXPECT_EQ(Str(Field(home, "type")), "tmpfs");
  std::vector<std::string> options = Strings(Field(home, "options"));
  SCOPED_TRACE(::testing::PrintToString(options));
  for (const std::string want : {"nosuid", "nodev", "mode=0700", "size=3145728"})
    EXPECT_TRUE(Contains(options, want)) << want;
  EXPECT_TRUE(Contains(options, absl::StrCat("uid=", spec.uid)));
  EXPECT_TRUE(Contains(options, absl::StrCat("gid=", spec.gid)));
  // The init's environment names it too (runsc would otherwise take /etc/passwd's).
  EXPECT_TRUE(Contains(Strings(Field(Field(doc->root, "process"), "env")), "HOME=/home/agent"));

  spec.home.clear();
  auto none = Parse(RenderOciConfig(spec));
  ASSERT_TRUE(none->ok);
  EXPECT_EQ(MountsByDestination(none->root).count("/home/agent"), 0u);
  for (const auto& e : Strings(Field(Field(none->root, "process"), "env")))
    EXPECT_NE(e.rfind("HOME=", 0), 0u) << e;
}

TEST(ProcessEnvTest, HomeIsAddedUnlessGivenOrExact) {
  EXPECT_TRUE(Contains(ProcessEnv({"A=1"}, false, {}, false, "/home/agent"), "HOME=/home/agent"));
  // The client's HOME wins, and there is still one HOME.
  auto env = ProcessEnv({"HOME=/w"}, false, {}, false, "/home/agent");
  EXPECT_EQ(std::count_if(env.begin(), env.end(),
                          [](const std::string& e) { return e.rfind("HOME=", 0) == 0; }),
            1);
  EXPECT_TRUE(Contains(env, "HOME=/w"));
  // An exact environment is exactly the client's.
  EXPECT_EQ(ProcessEnv({"A=1"}, false, {}, true, "/home/agent"), std::vector<std::string>{"A=1"});
  // No home: nothing added.
  EXPECT_EQ(ProcessEnv({"PATH=/a"}, false, {}, false, ""), std::vector<std::string>{"PATH=/a"});

  ExecSpec spec;
  spec.argv = {"true"};
  spec.env = {"PATH=/bin"};
  spec.home = "/home/agent";
  auto doc = Parse(RenderProcessJson(spec));
  ASSERT_TRUE(doc->ok);
  EXPECT_EQ(Strings(Field(doc->root, "env")),
            (std::vector<std::string>{"HOME=/home/agent", "PATH=/bin"}));
}

TEST(RenderProcessJsonTest, ThePathPrefixIsRendered) {
  ExecSpec spec;
  spec.argv = {"paseo-workspace-helper"};
  spec.env = {"PATH=/usr/bin"};
  spec.path_prefix = {"/opt/paseo/bin"};
  auto doc = Parse(RenderProcessJson(spec));
  ASSERT_TRUE(doc->ok);
  EXPECT_EQ(Strings(Field(doc->root, "env")),
            std::vector<std::string>{"PATH=/opt/paseo/bin:/usr/bin"});
}

}  // namespace
}  // namespace paseo

namespace paseo {
namespace {

// Issue 26: a sandbox says what of it is kept, in a file of known path and (without exactEnv)
// in the environment; an exact environment stays exact.
TEST(RenderOciConfigTest, TheKeptFileIsMountedReadOnlyAtItsKnownPath) {
  BundleSpec spec = TypicalBundle();
  spec.kept_file = "/var/lib/paseo-sandbox/bundles/sb-1/kept";
  auto doc = Parse(RenderOciConfig(spec));
  ASSERT_TRUE(doc->ok);
  auto mounts = MountsByDestination(doc->root);
  ASSERT_EQ(mounts.count(kKeptPath), 1u);
  JsonValue::Reader m = mounts.at(kKeptPath);
  EXPECT_EQ(Str(Field(m, "source")), spec.kept_file);
  EXPECT_EQ(Strings(Field(m, "options")),
            (std::vector<std::string>{"bind", "ro", "nosuid", "nodev", "noexec"}));
  EXPECT_EQ(KeptFileText({"/workspace", "/home/agent/.claude"}),
            "/workspace\n/home/agent/.claude\n");
  EXPECT_EQ(KeptFileText({}), "");
}

TEST(ProcessEnvTest, TheKeptSetIsInTheEnvironmentUnlessExactOrGiven) {
  const std::vector<std::string> kept = {"/workspace", "/data"};
  EXPECT_TRUE(Contains(ProcessEnv({"PATH=/bin"}, false, {}, false, "", kept),
                       "PASEO_SANDBOX_KEPT=/workspace:/data"));
  EXPECT_EQ(ProcessEnv({"PATH=/bin"}, false, {}, /*exact=*/true, "", kept),
            std::vector<std::string>{"PATH=/bin"});
  auto given = ProcessEnv({"PASEO_SANDBOX_KEPT=/mine"}, false, {}, false, "", kept);
  EXPECT_TRUE(Contains(given, "PASEO_SANDBOX_KEPT=/mine"));
  EXPECT_FALSE(Contains(given, "PASEO_SANDBOX_KEPT=/workspace:/data"));
  for (const auto& e : ProcessEnv({}, false, {}, false, "", {}))
    EXPECT_NE(e.rfind("PASEO_SANDBOX_KEPT=", 0), 0u) << "nothing kept: no variable";
}

}  // namespace
}  // namespace paseo
