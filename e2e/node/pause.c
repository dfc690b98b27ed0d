/* The node's pod sandbox process (the "pause" container): holds the pod's namespaces, sleeping
 * until it is told to stop. Built statically by e2e/node/images.sh into a FROM-scratch image. */
#include <signal.h>
#include <unistd.h>

static void stop(int sig) { (void)sig; _exit(0); }

int main(void) {
	signal(SIGINT, stop);
	signal(SIGTERM, stop);
	/* As PID 1 it must reap the children that pods leave behind. */
	signal(SIGCHLD, SIG_IGN);
	for (;;)
		pause();
}
