/* PLACEHOLDER: replaced by its helper */
int main(void) { return 77; }
