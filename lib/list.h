/* SPDX-License-Identifier: GPL-2.0 */
#ifndef KILN_LIB_LIST_H
#define KILN_LIB_LIST_H

#include <stdbool.h>
#include <stddef.h>

/*
 * A circular doubly linked list threaded through the objects themselves
 * (the kernel's list_head): no allocation, O(1) add and remove. A head is
 * a struct list_head of its own; an entry embeds one and is found back
 * with list_entry(). A node taken off with list_del() is left empty, so
 * list_empty(&node) also says "on no list".
 */
struct list_head {
	struct list_head *next, *prev;
};

static inline void list_init(struct list_head *l)
{
	l->next = l->prev = l;
}

static inline bool list_empty(const struct list_head *l)
{
	return l->next == l;
}

static inline void list_insert(struct list_head *n, struct list_head *prev,
			       struct list_head *next)
{
	n->prev = prev;
	n->next = next;
	prev->next = n;
	next->prev = n;
}

/* At the front of head. */
static inline void list_add(struct list_head *n, struct list_head *head)
{
	list_insert(n, head, head->next);
}

/* At the back of head. */
static inline void list_add_tail(struct list_head *n, struct list_head *head)
{
	list_insert(n, head->prev, head);
}

/* Unlinks n and leaves it empty. */
static inline void list_del(struct list_head *n)
{
	n->prev->next = n->next;
	n->next->prev = n->prev;
	list_init(n);
}

#define list_entry(ptr, type, member) \
	((type *)((char *)(ptr)-offsetof(type, member)))

/* The first entry of a nonempty list. */
#define list_first_entry(head, type, member) \
	list_entry((head)->next, type, member)

/* Each entry in order; pos may be unlinked or freed inside. */
#define list_for_each_entry_safe(pos, tmp, head, type, member) \
	for (pos = list_entry((head)->next, type, member),     \
	    tmp = list_entry(pos->member.next, type, member);  \
	     &pos->member != (head);                           \
	     pos = tmp, tmp = list_entry(tmp->member.next, type, member))

/* Each entry in order; the list does not change inside. */
#define list_for_each_entry(pos, head, type, member)       \
	for (pos = list_entry((head)->next, type, member); \
	     &pos->member != (head);                       \
	     pos = list_entry(pos->member.next, type, member))

#endif
