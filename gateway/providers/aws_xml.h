/* EC2's XML replies read into aws_ec2.h's structs: the one place that
 * includes libxml2.
 *
 * Elements are matched by local name, whatever their namespace, and only at
 * the paths EC2 documents (an instance's privateIpAddress, not one of its
 * network interfaces'). A reply that is not well-formed XML, one carrying
 * a DTD (EC2 never sends one; entities are never expanded), one whose root
 * is not the action's reply, or one whose identifiers do not fit their
 * fields is SL_EPARSE; a reply over AWS_XML_MAX_BYTES, or with more than
 * AWS_XML_MAX_ITEMS entries, is SL_ELIMIT. Nothing is fetched from the
 * network while parsing. */
#ifndef GW_AWS_XML_H
#define GW_AWS_XML_H

#include "aws_ec2.h"

#include <stddef.h>

#define AWS_XML_MAX_BYTES (4 << 20)   /* one reply */
#define AWS_XML_MAX_ITEMS 10000       /* entries of one reply */
#define AWS_NEXT_TOKEN_MAX 1024

/* One instance's change of state (TerminateInstances). */
struct aws_state_change {
  char id[AWS_ID_MAX];
  char current[24];
  char previous[24];
};

/* The error form <Response><Errors><Error><Code/><Message/></Error></Errors>
 * <RequestID/></Response> (the first Error) into *ret's code, message and
 * request_id (http_status untouched). 0, or SL_EPARSE when xml is not that
 * form. */
int aws_xml_error(const char *xml, size_t len, struct aws_ec2_error *ret);

/* The instances of a RunInstances reply (instancesSet at the top) or of a
 * DescribeInstances page (reservationSet/item/instancesSet): an owned array
 * (free(); NULL when empty) and, for a page, the nextToken into next ("" on
 * the last page; next may be NULL). */
int aws_xml_instances(const char *xml, size_t len, struct aws_instance **ret, size_t *ret_n,
                      char next[AWS_NEXT_TOKEN_MAX]);

/* A TerminateInstances reply: owned array of state changes. */
int aws_xml_state_changes(const char *xml, size_t len, struct aws_state_change **ret,
                          size_t *ret_n);

/* A DescribeSpotPriceHistory page: every item, in the reply's order. */
int aws_xml_spot_prices(const char *xml, size_t len, struct aws_spot_price **ret, size_t *ret_n,
                        char next[AWS_NEXT_TOKEN_MAX]);

/* A GetSpotPlacementScores page. */
int aws_xml_placement_scores(const char *xml, size_t len, struct aws_placement_score **ret,
                             size_t *ret_n, char next[AWS_NEXT_TOKEN_MAX]);

/* EC2's timestamps ("2026-11-24T05:18:22.000Z", an offset in place of Z
 * allowed) as seconds since the epoch: 0 or SL_EPARSE. */
int aws_xml_parse_time(const char *text, int64_t *ret);

#endif
