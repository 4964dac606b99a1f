// The main of every cc_fuzz corpus test (defs.bzl): each file named on the command line goes
// through the target's LLVMFuzzerTestOneInput once, as libFuzzer would replay it. A property the
// target checks fails by abort(); an input that crashed a fuzzer once stays in its corpus, so
// the native build keeps proving the fix. No inputs is a failure: every target has a corpus.
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "no corpus inputs\n");
    return 1;
  }
  for (int i = 1; i < argc; ++i) {
    std::ifstream in(argv[i], std::ios::binary);
    if (!in) {
      std::fprintf(stderr, "cannot read %s\n", argv[i]);
      return 1;
    }
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  }
  std::printf("%d corpus inputs passed\n", argc - 1);
  return 0;
}
