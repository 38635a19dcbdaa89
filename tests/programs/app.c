#include <stdio.h>
int lib_work(int);
int main(void) { printf("%d\n", lib_work(2)); return 0; }
