/* PLACEHOLDER */
int main() { return 77; }
