/* A small program that needs one library a stock image may lack
 * (libsodium): what test-gw-bundle bundles in place of spotlab's own. */
#include <sodium.h>
#include <stdio.h>

int main(void) {
  printf("%d\n", sodium_init());
  return 0;
}
