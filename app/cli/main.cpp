#include <cstdio>

int main() {
  std::puts("engram-cli: under construction");
  return 0;
}
