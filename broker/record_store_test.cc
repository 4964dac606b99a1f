#include "broker/record_store.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>

#include "gtest/gtest.h"

namespace paseo {
namespace {

std::string Dir() {
  const char* t = std::getenv("TEST_TMPDIR");
  std::string d = std::string(t ? t : "/tmp") + "/records";
  mkdir(d.c_str(), 0700);
  return d;
}

TEST(RecordStoreTest, WritesAndReadsBackReplacingTheOldRecord) {
  capnp::MallocMessageBuilder m;
  auto r = m.initRoot<records::BrokerSandbox>();
  r.setId("sb-1");
  r.setOwnerUid(4242);
  auto labels = r.initLabels(1);
  labels[0].setKey("task");
  labels[0].setValue("fix the bug");
  auto procs = r.initProcesses(1);
  procs[0].setId("p-1");
  procs[0].initArgv(2).set(1, "x");
  ASSERT_TRUE(WriteRecordAtomically(Dir(), "record", r.asReader()).ok());
  r.setOwnerUid(1000);
  ASSERT_TRUE(WriteRecordAtomically(Dir(), "record", r.asReader()).ok());
  capnp::MallocMessageBuilder back;
  ASSERT_TRUE(ReadRecord(Dir(), "record", back).ok());
  auto b = back.getRoot<records::BrokerSandbox>();
  EXPECT_EQ(b.getOwnerUid(), 1000u);
  EXPECT_EQ(std::string(b.getLabels()[0].getValue().cStr()), "fix the bug");
  EXPECT_EQ(std::string(b.getProcesses()[0].getArgv()[1].cStr()), "x");
  struct stat st;
  EXPECT_NE(stat((Dir() + "/.record.tmp").c_str(), &st), 0) << "temporary file left behind";
}

TEST(RecordStoreTest, ATornOrMissingRecordIsAnErrorNotACrash) {
  std::ofstream(Dir() + "/torn", std::ios::binary) << std::string("\x05\x00\x00", 3);
  capnp::MallocMessageBuilder m;
  EXPECT_FALSE(ReadRecord(Dir(), "torn", m).ok());
  EXPECT_FALSE(ReadRecord(Dir(), "missing", m).ok());
}

}  // namespace
}  // namespace paseo
