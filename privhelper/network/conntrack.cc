// See conntrack.h.
#include "privhelper/network/conntrack.h"

#include <arpa/inet.h>
#include <libnetfilter_conntrack/libnetfilter_conntrack.h>
#include <sys/socket.h>

#include <cerrno>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace paseo::network {
namespace {

struct Dump {
  const AddressMatch* match;
  std::vector<nf_conntrack*> matched;  // clones, ours to destroy
};

int Collect(enum nf_conntrack_msg_type, struct nf_conntrack* ct, void* data) {
  auto* dump = static_cast<Dump*>(data);
  if (nfct_get_attr_u8(ct, ATTR_L3PROTO) != AF_INET) return NFCT_CB_CONTINUE;
  for (auto attr : {ATTR_ORIG_IPV4_SRC, ATTR_ORIG_IPV4_DST, ATTR_REPL_IPV4_SRC,
                    ATTR_REPL_IPV4_DST}) {
    if (nfct_attr_is_set(ct, attr) > 0 && (*dump->match)(ntohl(nfct_get_attr_u32(ct, attr)))) {
      nf_conntrack* copy = nfct_clone(ct);
      if (copy != nullptr) dump->matched.push_back(copy);
      break;
    }
  }
  return NFCT_CB_CONTINUE;
}

// Runs `then` on the matching entries of a dump (over a handle of its own, since a handle
// cannot take requests while it dumps).
absl::StatusOr<size_t> WithMatching(
    const AddressMatch& match,
    const std::function<absl::StatusOr<size_t>(nfct_handle*, const std::vector<nf_conntrack*>&)>&
        then) {
  nfct_handle* handle = nfct_open(CONNTRACK, 0);
  if (handle == nullptr) return ErrnoStatus("nfct_open", "ctnetlink");
  absl::Cleanup close = [handle] { nfct_close(handle); };
  Dump dump{&match, {}};
  absl::Cleanup free_matched = [&dump] {
    for (nf_conntrack* ct : dump.matched) nfct_destroy(ct);
  };
  nfct_callback_register(handle, NFCT_T_ALL, Collect, &dump);
  uint32_t family = AF_INET;
  int rc = nfct_query(handle, NFCT_Q_DUMP, &family);
  nfct_callback_unregister(handle);
  if (rc != 0) return ErrnoStatus("nfct_query", "conntrack dump");
  return then(handle, dump.matched);
}

}  // namespace

AddressMatch InCidr(const Cidr& cidr) {
  return [cidr](uint32_t addr) { return cidr.Contains(addr); };
}

absl::StatusOr<size_t> FlushConntrack(const AddressMatch& match) {
  return WithMatching(match, [](nfct_handle* handle, const std::vector<nf_conntrack*>& matched)
                                 -> absl::StatusOr<size_t> {
    size_t deleted = 0;
    absl::Status error = absl::OkStatus();
    for (nf_conntrack* ct : matched) {
      if (nfct_query(handle, NFCT_Q_DESTROY, ct) == 0) {
        ++deleted;
      } else if (errno != ENOENT && error.ok()) {  // ENOENT: it expired meanwhile
        error = ErrnoStatus("nfct_query", "conntrack delete");
      }
    }
    if (!error.ok()) return error;
    return deleted;
  });
}

absl::StatusOr<size_t> CountConntrack(const AddressMatch& match) {
  return WithMatching(match, [](nfct_handle*, const std::vector<nf_conntrack*>& matched)
                                 -> absl::StatusOr<size_t> { return matched.size(); });
}

}  // namespace paseo::network
