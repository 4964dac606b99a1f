// The audit log's writer: line format and JSON escaping of hostile strings, coalescing of
// refusal floods per uid, and the rotating file's bound.
#include "broker/audit_log.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include <capnp/compat/json.h>
#include <capnp/message.h>
#include <capnp/schema.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"

namespace paseo {
namespace {

namespace fs = std::filesystem;

class MemorySink : public AuditSink {
 public:
  explicit MemorySink(std::vector<std::string>* lines) : lines_(lines) {}
  void Append(absl::string_view line) override { lines_->emplace_back(line); }

 private:
  std::vector<std::string>* lines_;
};

// A strict check that `line` is one JSON object ending in '\n': parsed with capnp's JSON
// parser into a generic value (which rejects malformed text, raw control characters and
// invalid escapes), and valid UTF-8 throughout.
bool IsJsonLine(const std::string& line) {
  if (line.empty() || line.back() != '\n') return false;
  if (line.find('\n') != line.size() - 1) return false;
  if (SanitizedUtf8(line, line.size()) != line) return false;
  capnp::JsonCodec codec;
  capnp::MallocMessageBuilder message;
  auto value = message.initRoot<capnp::JsonValue>();
  auto error = kj::runCatchingExceptions(
      [&] { codec.decodeRaw(kj::ArrayPtr<const char>(line.data(), line.size() - 1), value); });
  return error == nullptr && value.isObject();
}

// The value of string field `key` in `line` as the JSON parser decodes it.
std::string Field(const std::string& line, const std::string& key) {
  capnp::JsonCodec codec;
  capnp::MallocMessageBuilder message;
  auto value = message.initRoot<capnp::JsonValue>();
  codec.decodeRaw(kj::ArrayPtr<const char>(line.data(), line.size() - 1), value);
  for (auto f : value.getObject()) {
    if (f.getName() != key.c_str()) continue;
    auto v = f.getValue();
    if (v.isString()) return v.getString().cStr();
    if (v.isNumber()) return absl::StrCat(static_cast<int64_t>(v.getNumber()));
  }
  return "<absent>";
}

AuditRecord Refusal(int64_t uid, const std::string& op = "Supervisor.listSandboxes") {
  AuditRecord r;
  r.operation = op;
  r.uid = uid;
  r.gid = uid;
  r.pid = 7;
  r.result = AuditResult::kRefused;
  r.error = "permission-denied";
  r.reason = "permission-denied: no deployment for uid";
  return r;
}

TEST(AuditLogTest, AnAllowedCallIsOneLineWithEveryField) {
  AuditRecord r;
  r.operation = "Sandbox.startProcess";
  r.uid = 1000;
  r.gid = 1001;
  r.pid = 4242;
  r.deployment = "paseo-main";
  r.sandbox_id = "sb-abc";
  r.process_id = "p-def";
  std::string line = AuditLog::Line(r, 1764583200123);  // 2025-12-01T10:00:00.123Z
  ASSERT_TRUE(IsJsonLine(line)) << line;
  EXPECT_EQ(Field(line, "time"), "2025-12-01T10:00:00.123Z");
  EXPECT_EQ(Field(line, "uid"), "1000");
  EXPECT_EQ(Field(line, "gid"), "1001");
  EXPECT_EQ(Field(line, "pid"), "4242");
  EXPECT_EQ(Field(line, "operation"), "Sandbox.startProcess");
  EXPECT_EQ(Field(line, "deployment"), "paseo-main");
  EXPECT_EQ(Field(line, "sandboxId"), "sb-abc");
  EXPECT_EQ(Field(line, "processId"), "p-def");
  EXPECT_EQ(Field(line, "result"), "ok");
  EXPECT_EQ(Field(line, "reason"), "<absent>");
}

TEST(AuditLogTest, ARefusalCarriesItsErrorAndReason) {
  std::string line = AuditLog::Line(Refusal(1000), 0);
  ASSERT_TRUE(IsJsonLine(line)) << line;
  EXPECT_EQ(Field(line, "time"), "1970-01-01T00:00:00.000Z");
  EXPECT_EQ(Field(line, "result"), "refused");
  EXPECT_EQ(Field(line, "error"), "permission-denied");
  EXPECT_EQ(Field(line, "reason"), "permission-denied: no deployment for uid");
  EXPECT_EQ(Field(line, "deployment"), "<absent>");
}

// What a client sends (a sandbox id to getSandbox, a deployment id) reaches the log: no byte
// of it may break a line, forge another line, or make the line invalid JSON.
TEST(AuditLogTest, HostileStringsStayInsideOneValidLine) {
  const std::vector<std::string> hostile = {
      "sb-1\n{\"time\":\"forged\",\"result\":\"ok\"}",
      "\"},\"result\":\"ok",
      "back\\slash\\",
      std::string("nul\0inside", 10),
      "\x01\x02\x1b[31mred\x7f",
      "\xff\xfe invalid utf-8 \xc0\xaf overlong \xed\xa0\x80 surrogate",
      "\xe2\x80\xa8 line separator \xe2\x80\xa9",
      std::string(100000, 'x'),
      std::string(5000, '\n'),
      std::string(3000, '\xff'),
      "trailing lead byte \xe2\x82",
  };
  for (const auto& h : hostile) {
    AuditRecord r = Refusal(1000, h);
    r.deployment = h;
    r.sandbox_id = h;
    r.process_id = h;
    r.error = h;
    r.reason = h;
    std::string line = AuditLog::Line(r, 0);
    EXPECT_TRUE(IsJsonLine(line)) << line.substr(0, 200);
    EXPECT_LE(line.size(), kMaxAuditLineBytes);
    EXPECT_EQ(Field(line, "result"), "refused");
    EXPECT_EQ(Field(line, "uid"), "1000");
  }
  // Valid text is kept as it is.
  AuditRecord r = Refusal(1000, "caf\xc3\xa9 \xf0\x9f\x98\x80");
  EXPECT_EQ(Field(AuditLog::Line(r, 0), "operation"), "caf\xc3\xa9 \xf0\x9f\x98\x80");
}

TEST(AuditLogTest, SanitizedUtf8CutsAtACharacterBoundary) {
  EXPECT_EQ(SanitizedUtf8("abc", 3), "abc");
  EXPECT_EQ(SanitizedUtf8("abcdefgh", 6), "abc...");
  EXPECT_EQ(SanitizedUtf8("\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9", 6), "\xc3\xa9...");
  EXPECT_EQ(SanitizedUtf8("a\xff", 10), "a\xef\xbf\xbd");
}

TEST(AuditLogTest, AllowedCallsAreNeverCoalesced) {
  std::vector<std::string> lines;
  int64_t now = 1000000;
  AuditLog log(std::make_unique<MemorySink>(&lines), 2, [&] { return now; });
  AuditRecord ok;
  ok.operation = "Supervisor.info";
  ok.uid = 5;
  for (int i = 0; i < 100; ++i) log.Write(ok);
  log.Flush();
  EXPECT_EQ(lines.size(), 100u);
}

// A uid no deployment allows may still ask info(): those allowed calls are coalesced too, or
// such a uid could flood the journal with them.
TEST(AuditLogTest, AllowedCallsOfAnUnauthorizedPeerAreCoalesced) {
  std::vector<std::string> lines;
  int64_t now = 1000000;
  AuditLog log(std::make_unique<MemorySink>(&lines), 2, [&] { return now; });
  AuditRecord info;
  info.operation = "Supervisor.info";
  info.uid = 5;
  info.unauthorized_peer = true;
  for (int i = 0; i < 100; ++i) log.Write(info);
  now += 1000;
  log.Flush();
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(Field(lines[0], "result"), "ok");
  EXPECT_EQ(Field(lines[2], "result"), "coalesced");
  EXPECT_EQ(Field(lines[2], "count"), "98");
  EXPECT_EQ(Field(lines[2], "operation"), "Supervisor.info");
}

TEST(AuditLogTest, AFloodOfRefusalsFromOneUidIsCountedNotWritten) {
  std::vector<std::string> lines;
  int64_t now = 1000000;  // ms
  AuditLog log(std::make_unique<MemorySink>(&lines), 3, [&] { return now; });
  for (int i = 0; i < 1000; ++i) log.Write(Refusal(666));
  // Another uid has its own allowance: a flood cannot hide someone else's refusal.
  log.Write(Refusal(1000));
  ASSERT_EQ(lines.size(), 4u);
  for (const auto& l : lines) EXPECT_EQ(Field(l, "result"), "refused");
  EXPECT_EQ(Field(lines[3], "uid"), "1000");
  // Within the same second nothing more; once it has ended, one summary of the rest.
  now += 999;
  log.Flush();
  EXPECT_EQ(lines.size(), 4u);
  now += 1;
  log.Flush();
  ASSERT_EQ(lines.size(), 5u);
  ASSERT_TRUE(IsJsonLine(lines[4])) << lines[4];
  EXPECT_EQ(Field(lines[4], "result"), "coalesced");
  EXPECT_EQ(Field(lines[4], "uid"), "666");
  EXPECT_EQ(Field(lines[4], "count"), "997");
  EXPECT_EQ(Field(lines[4], "operation"), "Supervisor.listSandboxes");
  EXPECT_EQ(Field(lines[4], "error"), "permission-denied");
  // Flushed windows are forgotten: no second summary, and the next second starts afresh.
  log.Flush();
  EXPECT_EQ(lines.size(), 5u);
  for (int i = 0; i < 5; ++i) log.Write(Refusal(666));
  EXPECT_EQ(lines.size(), 8u);
}

TEST(AuditLogTest, ANewSecondWritesThePreviousSummaryFirst) {
  std::vector<std::string> lines;
  int64_t now = 5000;
  AuditLog log(std::make_unique<MemorySink>(&lines), 1, [&] { return now; });
  for (int i = 0; i < 10; ++i) log.Write(Refusal(9));
  now += 1000;
  log.Write(Refusal(9));
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(Field(lines[1], "result"), "coalesced");
  EXPECT_EQ(Field(lines[1], "count"), "9");
  EXPECT_EQ(Field(lines[2], "result"), "refused");
}

TEST(AuditLogTest, EveryRefusalIsAccountedFor) {
  std::vector<std::string> lines;
  int64_t now = 0;
  AuditLog log(std::make_unique<MemorySink>(&lines), 20, [&] { return now; });
  for (int i = 0; i < 100000; ++i) {
    log.Write(Refusal(i % 3));
    now += 1;  // 100 s of a flood from three uids
    if (i % 250 == 0) log.Flush();
  }
  now += 1000;
  log.Flush();
  int64_t counted = 0;
  for (const auto& l : lines) {
    ASSERT_TRUE(IsJsonLine(l)) << l;
    counted += Field(l, "result") == "coalesced" ? std::stoll(Field(l, "count")) : 1;
  }
  EXPECT_EQ(counted, 100000);
  EXPECT_LE(lines.size(), 100u * 3u * 21u);
}

class RotatingFileSinkTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* base = getenv("TEST_TMPDIR");
    std::string tmpl = absl::StrCat(base != nullptr && *base != '\0' ? base : "/tmp",
                                    "/audit_log_test.XXXXXX");
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  uint64_t TotalBytes() const {
    uint64_t total = 0;
    for (const auto& e : fs::directory_iterator(dir_)) total += fs::file_size(e.path());
    return total;
  }
  std::vector<std::string> Names() const {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(dir_)) names.push_back(e.path().filename());
    std::sort(names.begin(), names.end());
    return names;
  }
  static std::string Read(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  std::string dir_;
};

TEST_F(RotatingFileSinkTest, TheFilesNeverHoldMoreThanMaxBytesTimesMaxFiles) {
  constexpr uint64_t kMax = 65536;
  auto sink = RotatingFileSink::Open(dir_ + "/audit.log", kMax, 3);
  ASSERT_TRUE(sink.ok()) << sink.status();
  AuditLog log(std::move(*sink), 1000000);
  for (int i = 0; i < 20000; ++i) {
    AuditRecord r = Refusal(1000 + i);
    r.sandbox_id = absl::StrCat("sb-", i);
    log.Write(r);
    if (i % 1000 == 0) {
      ASSERT_LE(TotalBytes(), 3 * kMax);
    }
  }
  EXPECT_LE(TotalBytes(), 3 * kMax);
  EXPECT_EQ(Names(), (std::vector<std::string>{"audit.log", "audit.log.1", "audit.log.2"}));
  for (const auto& name : Names()) {
    std::string text = Read(dir_ + "/" + name);
    EXPECT_LE(text.size(), kMax);
    for (absl::string_view l : absl::StrSplit(text, '\n', absl::SkipEmpty()))
      ASSERT_TRUE(IsJsonLine(absl::StrCat(l, "\n"))) << name << ": " << l;
  }
  // The newest line is last in audit.log; audit.log.1 holds the ones just before it.
  std::string current = Read(dir_ + "/audit.log");
  EXPECT_TRUE(absl::StrContains(current, "\"sandboxId\":\"sb-19999\"")) << current.substr(0, 200);
  std::string previous = Read(dir_ + "/audit.log.1");
  size_t first = current.find("\"sandboxId\":\"sb-") + 16;
  int first_current = std::stoi(current.substr(first, current.find('"', first) - first));
  EXPECT_TRUE(absl::StrContains(previous, absl::StrCat("\"sandboxId\":\"sb-", first_current - 1,
                                                       "\"")));
  // The files are the broker's alone.
  struct stat st;
  ASSERT_EQ(stat((dir_ + "/audit.log").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
}

TEST_F(RotatingFileSinkTest, OneFileStartsAgainWhenFull) {
  auto sink = RotatingFileSink::Open(dir_ + "/audit.log", 65536, 1);
  ASSERT_TRUE(sink.ok()) << sink.status();
  AuditLog log(std::move(*sink), 1000000);
  for (int i = 0; i < 5000; ++i) log.Write(Refusal(i));
  EXPECT_EQ(Names(), std::vector<std::string>{"audit.log"});
  EXPECT_LE(TotalBytes(), 65536u);
  EXPECT_GT(TotalBytes(), 0u);
}

// A restarted broker appends to what its predecessor wrote (and counts it toward the bound);
// files a larger maxFiles left behind are removed.
TEST_F(RotatingFileSinkTest, ReopeningAppendsAndDropsFilesBeyondMaxFiles) {
  for (const char* extra : {"/audit.log.3", "/audit.log.7", "/audit.log.x", "/other.5"}) {
    std::ofstream(dir_ + extra) << "old\n";
  }
  std::ofstream(dir_ + "/audit.log") << std::string(65500, 'a') << "\n";
  auto sink = RotatingFileSink::Open(dir_ + "/audit.log", 65536, 3);
  ASSERT_TRUE(sink.ok()) << sink.status();
  EXPECT_EQ(Names(), (std::vector<std::string>{"audit.log", "audit.log.x", "other.5"}));
  AuditLog log(std::move(*sink), 1000000);
  log.Write(Refusal(1));  // does not fit beside the 65501 bytes: rotates first
  EXPECT_EQ(Read(dir_ + "/audit.log.1").size(), 65501u);
  EXPECT_EQ(Field(Read(dir_ + "/audit.log"), "uid"), "1");
}

TEST_F(RotatingFileSinkTest, ASymlinkInPlaceOfTheFileIsNotFollowed) {
  std::string target = dir_ + "/target";
  std::ofstream(target) << "";
  ASSERT_EQ(symlink(target.c_str(), (dir_ + "/audit.log").c_str()), 0);
  auto sink = RotatingFileSink::Open(dir_ + "/audit.log", 65536, 2);
  EXPECT_FALSE(sink.ok());
  EXPECT_EQ(Read(target), "");
}

// A rotation that fails (here: the directory turned read-only; on a host, a full disk or no
// fds) drops lines and renames nothing more, so the older files survive; once it can, it
// goes on.
TEST_F(RotatingFileSinkTest, AFailedRotationDropsLinesAndKeepsTheOlderFiles) {
  if (geteuid() == 0) GTEST_SKIP() << "root ignores directory permissions";
  auto opened = RotatingFileSink::Open(dir_ + "/audit.log", 65536, 3);
  ASSERT_TRUE(opened.ok()) << opened.status();
  RotatingFileSink* sink = opened->get();
  AuditLog log(std::move(*opened), 1000000);
  for (int i = 0; i < 100000 && Names().size() < 2; ++i) log.Write(Refusal(i));  // rotated once
  ASSERT_EQ(Names(), (std::vector<std::string>{"audit.log", "audit.log.1"}));
  std::string older = Read(dir_ + "/audit.log.1");
  ASSERT_EQ(chmod(dir_.c_str(), 0500), 0);
  for (int i = 0; i < 2000; ++i) log.Write(Refusal(i));
  ASSERT_EQ(chmod(dir_.c_str(), 0700), 0);
  EXPECT_GT(sink->dropped(), 0u);
  EXPECT_EQ(Names(), (std::vector<std::string>{"audit.log", "audit.log.1"}));
  EXPECT_EQ(Read(dir_ + "/audit.log.1"), older);
  log.Write(Refusal(424242));
  EXPECT_EQ(Names(), (std::vector<std::string>{"audit.log", "audit.log.1", "audit.log.2"}));
  EXPECT_EQ(Field(Read(dir_ + "/audit.log"), "uid"), "424242");
  EXPECT_LE(TotalBytes(), 3u * 65536u);
}

TEST(StderrAuditSinkTest, EachLineIsPrefixed) {
  int p[2];
  ASSERT_EQ(pipe(p), 0);
  {
    AuditLog log(std::make_unique<StderrAuditSink>(p[1]), 10);
    log.Write(Refusal(3));
  }
  close(p[1]);
  char buf[4096];
  ssize_t n = read(p[0], buf, sizeof(buf));
  close(p[0]);
  ASSERT_GT(n, 0);
  std::string text(buf, static_cast<size_t>(n));
  ASSERT_TRUE(absl::StartsWith(text, kAuditStderrPrefix)) << text;
  EXPECT_TRUE(IsJsonLine(text.substr(strlen(kAuditStderrPrefix)))) << text;
}

}  // namespace
}  // namespace paseo
