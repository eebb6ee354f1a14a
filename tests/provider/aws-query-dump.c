/* Prints "NAME BODY" for each request of aws-query-cases.h, one a line,
 * for test_aws_query_botocore.py. */
#include "aws-query-cases.h"

#include <stdio.h>

int main(void) {
  for (size_t i = 0; case_names[i]; i++) {
    struct aws_query *q = NULL;
    const char *body;
    size_t len;
    if (case_build(case_names[i], &q) < 0 || aws_query_body(q, &body, &len) < 0) {
      fprintf(stderr, "%s: not built\n", case_names[i]);
      return 1;
    }
    printf("%s %s\n", case_names[i], body);
    aws_query_free(q);
  }
  return 0;
}
