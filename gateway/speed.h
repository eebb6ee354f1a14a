/* The prior for how fast an instance type trains: a shipped table of
 * relative speeds per GPU model (speed.c). Measured step times replace it
 * as soon as a job has any (place.h). */
#ifndef GW_SPEED_H
#define GW_SPEED_H

/* The relative training speed of one GPU of model gpu_model ("A10G"),
 * A10G = 1; 0 when the model is not in the table. Case-insensitive. */
double gw_speed_relative(const char *gpu_model);

#endif
