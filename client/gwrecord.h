/* The run record of a job (the gateway's "record" reply, record.h there) as
 * text, for `spotlab show JOB` and %show JOB. */
#ifndef JK_GWRECORD_H
#define JK_GWRECORD_H

#include <jansson.h>

/* record (borrowed) as a readable summary ending in a newline; owned, NULL
 * on OOM. Fields the record lacks are shown as "-". */
char *jk_format_record(const json_t *record);

#endif
