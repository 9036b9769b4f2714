// SPDX-License-Identifier: GPL-2.0
/*
 * Lifecycle events: vm.subscribe and the vm.event notifications.
 *
 * Events are posted from any thread (the API thread: agent-ready,
 * exec-started, exec-exited, policy-changed; a vCPU thread: guest-panic,
 * triple-fault; the main thread: shutdown) into one ring of
 * API_EVENTS_MAX events. The poster never waits for a subscriber: it
 * takes the ring's lock for a few stores (the event's text is built
 * before), evicting the oldest event when the ring is full, and wakes
 * the API thread. Each subscriber is a position in that ring: the API
 * thread copies what it has not sent yet into the subscriber's output,
 * as long as that output is under API_OUT_HIGH. A subscriber that falls
 * API_EVENTS_MAX events behind has lost the oldest; its next event says
 * how many (`dropped`). So each subscriber has a queue of at most
 * API_EVENTS_MAX events, and a slow one holds up nobody.
 */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "vmm/api/api-internal.h"

#define EVENT_PREFIX_LEN 96 /* the message up to the event's own fields */

static uint64_t wall_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int events_init(struct api_events *ev)
{
	return -pthread_mutex_init(&ev->lock, NULL);
}

void events_exit(struct api_events *ev)
{
	unsigned int i;

	for (i = 0; i < API_EVENTS_MAX; i++)
		free(ev->ring[i].body);
	pthread_mutex_destroy(&ev->lock);
}

/*
 * The event's text without its seq: {"time":T,"type":TYPE,...}. seq is
 * given under the lock and written in front when the event is sent.
 */
static char *event_body(const char *type, json_t *fields)
{
	json_t *o = json_pack("{s:I, s:s}", "time", (json_int_t)wall_ms(),
			      "type", type);
	char *s = NULL;

	if (o && (!fields || !json_object_update(o, fields)))
		s = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER);
	json_decref(fields);
	json_decref(o);
	return s;
}

void api__event(struct api *api, const char *type, json_t *fields)
{
	struct api_events *ev;
	struct api_event *slot;
	uint64_t one = 1;
	char *body, *old;

	if (!api) {
		json_decref(fields);
		return;
	}
	ev = &api->events;
	body = event_body(type, fields);
	if (!body) {
		atomic_fetch_add(&ev->lost, 1);
		return;
	}
	pthread_mutex_lock(&ev->lock);
	ev->seq++;
	slot = &ev->ring[(ev->seq - 1) % API_EVENTS_MAX];
	old = slot->body;
	slot->body = body;
	slot->seq = ev->seq;
	pthread_mutex_unlock(&ev->lock);
	free(old);
	/* The API thread sends it; an eventfd write never blocks here. */
	if (write(api->wake_fd, &one, sizeof(one)) < 0)
		(void)0; /* the counter is saturated: it is awake anyway */
}

/* One vm.event message for slot, with the count dropped before it. */
static int event_send(struct client *c, const struct api_event *slot,
		      uint64_t dropped)
{
	static const char tail[] = "}\n";
	char pre[EVENT_PREFIX_LEN];
	int n;

	if (dropped)
		n = snprintf(pre, sizeof(pre),
			     "{\"jsonrpc\":\"2.0\",\"method\":\"vm.event\","
			     "\"params\":{\"seq\":%" PRIu64
			     ",\"dropped\":%" PRIu64 ",",
			     slot->seq, dropped);
	else
		n = snprintf(pre, sizeof(pre),
			     "{\"jsonrpc\":\"2.0\",\"method\":\"vm.event\","
			     "\"params\":{\"seq\":%" PRIu64 ",",
			     slot->seq);
	/* body is a JSON object: its own '{' is replaced by ours. */
	if (bytequeue__append(&c->out, pre, n) ||
	    bytequeue__append(&c->out, slot->body + 1,
			      strlen(slot->body + 1)) ||
	    bytequeue__append(&c->out, tail, sizeof(tail) - 1))
		return -ENOMEM;
	return 0;
}

/* What c has not had yet, while its output has room. */
static void events_pump_one(struct api *api, struct client *c)
{
	struct api_events *ev = &api->events;
	const struct api_event *slot;
	uint64_t oldest, dropped = 0;
	int ret = 0;

	pthread_mutex_lock(&ev->lock);
	oldest = ev->seq >= API_EVENTS_MAX ? ev->seq - API_EVENTS_MAX + 1 : 1;
	if (c->ev_next < oldest) {
		c->ev_dropped += oldest - c->ev_next;
		c->ev_next = oldest;
	}
	while (!ret && c->ev_next <= ev->seq && c->out.len <= API_OUT_HIGH) {
		slot = &ev->ring[(c->ev_next - 1) % API_EVENTS_MAX];
		dropped = c->ev_dropped;
		ret = event_send(c, slot, dropped);
		if (!ret) {
			c->ev_next++;
			c->ev_dropped = 0;
		}
	}
	pthread_mutex_unlock(&ev->lock);
	if (ret) {
		pr_err("api: client %d: out of memory, dropping it", c->fd);
		client_kill(c);
	}
}

void events_pump(struct api *api)
{
	struct client *c;

	for (c = api->clients; c; c = c->next)
		if (c->subscribed && !c->dead)
			events_pump_one(api, c);
}

/*
 * api__destroy, the thread joined: the last events (shutdown) go out to
 * the subscribers that read them within API_EVENTS_FLUSH_MS, all told.
 */
void events_flush(struct api *api)
{
	uint64_t end = api_now_ms() + API_EVENTS_FLUSH_MS, now;
	struct pollfd pf[API_MAX_CLIENTS];
	struct client *cs[API_MAX_CLIENTS];
	struct client *c;
	unsigned int n, i;

	events_pump(api);
	while ((now = api_now_ms()) < end) {
		n = 0;
		for (c = api->clients; c && n < API_MAX_CLIENTS; c = c->next) {
			if (c->dead || !c->subscribed)
				continue;
			events_pump_one(api, c);
			if (c->dead || !c->out.len)
				continue;
			pf[n] = (struct pollfd){ .fd = c->fd,
						 .events = POLLOUT };
			cs[n++] = c;
		}
		if (!n || poll(pf, n, (int)(end - now)) <= 0)
			return;
		for (i = 0; i < n; i++)
			if (pf[i].revents & (POLLOUT | POLLHUP | POLLERR))
				client_writable(cs[i]);
	}
}

/*
 * vm.subscribe {since}: events after seq `since` that the ring still
 * holds (0: every one; absent: only new ones), then each new one.
 */
static void m_vm_subscribe(struct rpc *r)
{
	struct api_events *ev = &r->api->events;
	json_t *since = json_object_get(r->params, "since");
	uint64_t from = 0, seq;

	if (since && !param_uint(r, "since", UINT64_MAX - 1, &from))
		return;
	if (r->c->subscribed) {
		param_error(r, "vm.subscribe: this client is subscribed "
			       "already");
		return;
	}
	pthread_mutex_lock(&ev->lock);
	seq = ev->seq;
	pthread_mutex_unlock(&ev->lock);
	if (!since || from > seq)
		from = seq;
	r->c->subscribed = true;
	r->c->ev_next = from + 1;
	client_reply(r->c, r->id, json_pack("{s:I}", "seq", (json_int_t)seq));
}

const struct api_method event_methods[] = {
	{ "vm.subscribe", m_vm_subscribe },
	{ NULL, NULL },
};
