/* `spotlab-kernel install`: writes the Jupyter kernelspec for this binary.
 *
 * The kernelspec (DESIGN.md §2) names the running executable by its absolute
 * path, so a front end started from anywhere finds the same build that was
 * installed. */
#ifndef JK_INSTALL_H
#define JK_INSTALL_H

/* Runs the install subcommand. argv[0] is "install"; the rest are its
 * options: [--user | --prefix DIR | --sys-prefix] [--name NAME]
 * [--display-name TEXT]. Borrows argv. Prints what it did on stdout and
 * errors on stderr; returns the process exit status (0 success, 1 failure,
 * 2 bad usage). Never exits itself. */
int jk_install_main(int argc, char **argv);

#endif
