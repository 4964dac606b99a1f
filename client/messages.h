// Where the CLI's own words go (errors, notices, a gap, a lost connection): to stderr or a
// --messages file, but never into a stream's bytes. A script that keeps what `logs --stream
// stderr 2>file` or `run ... 2>file` wrote, and resumes from its size, must find only the
// stream's bytes there; a person at a terminal sees both.
//
//   auto messages = std::make_shared<Messages>(STDERR_FILENO);
//   messages->StreamWritesTo(STDERR_FILENO);  // from here on stderr carries a stream
//   messages->Say("not written if stderr is a file or a pipe");
#pragma once

#include <cstddef>
#include <string>

#include <kj/io.h>

namespace paseo::client {

// Writes all of [data, data + size) unless the fd is gone. EAGAIN is retried: our stdout and
// stderr can be non-blocking because they share their open file description with a terminal
// stdin that input forwarding made O_NONBLOCK.
void WriteAll(int fd, const void* data, size_t size);

class Messages {
 public:
  // To `fd` (stderr; not owned).
  explicit Messages(int fd);
  // To a --messages file the CLI opened.
  explicit Messages(kj::AutoCloseFd file);

  // Writes "paseo-sandbox: <text>\n", framed "\r\n...\r\n" while the local terminal may be raw,
  // unless silenced.
  void Say(const std::string& text);

  // A stream's bytes are written to `fd` from now on. If that is where the messages go and it
  // is not a terminal, they are silenced from now on: the exit status tells what happened.
  void StreamWritesTo(int fd);
  bool silenced() const { return silenced_; }

  void set_raw_terminal(bool raw) { raw_terminal_ = raw; }

 private:
  kj::AutoCloseFd owned_;
  int fd_;
  bool terminal_;
  bool silenced_ = false;
  bool raw_terminal_ = false;
};

}  // namespace paseo::client
