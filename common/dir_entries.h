// The names in a directory, without "." and "..": for the daemons' state directories and the
// tests' /proc and cgroup walks. An unreadable directory has no entries.
#pragma once

#include <dirent.h>

#include <string>
#include <vector>

namespace paseo {

inline std::vector<std::string> DirEntries(const std::string& dir) {
  std::vector<std::string> names;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) {
      std::string n = e->d_name;
      if (n != "." && n != "..") names.push_back(n);
    }
    closedir(d);
  }
  return names;
}

}  // namespace paseo
