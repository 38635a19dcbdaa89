/* Linked against libgreet.so.1, found at run time through $ORIGIN. */
int greet(int x);

int main(void) {
    return greet(0) == 42 ? 0 : 1;
}
