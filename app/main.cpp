#include <cstdio>
int main() { std::puts("mimi"); return 0; }
