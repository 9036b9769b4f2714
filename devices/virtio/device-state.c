// SPDX-License-Identifier: GPL-2.0
/*
 * A device's pause and its state for a snapshot (device.h, "Pause and
 * snapshot"; Documentation/snapshots.md). The core saves what every
 * device has (status, features, queues, config space); a device adds its
 * own through ops->save, and one without that op cannot be saved.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <linux/virtio_config.h>
#define VIRTIO_RING_NO_LEGACY
#include <linux/virtio_ring.h>

#include "lib/base64.h"
#include "lib/compiler.h"
#include "lib/timespec.h"
#include "lib/worker.h"
#include "devices/virtio/device.h"

bool virtio_device__is_paused(const struct virtio_device *dev)
{
	return __atomic_load_n(&dev->paused, __ATOMIC_ACQUIRE);
}

int virtio_device__pause(struct virtio_device *dev, unsigned int timeout_ms)
{
	struct timespec deadline;
	int ret = 0;

	timespec__deadline_in(&deadline, CLOCK_REALTIME, timeout_ms);
	pthread_mutex_lock(&dev->lock);
	if (dev->paused) {
		pthread_mutex_unlock(&dev->lock);
		return -EALREADY;
	}
	/* From here the loop pops nothing: is_live is read under the lock. */
	__atomic_store_n(&dev->paused, true, __ATOMIC_RELEASE);
	if (dev->ops->quiesce)
		ret = dev->ops->quiesce(dev, &deadline);
	if (ret)
		__atomic_store_n(&dev->paused, false, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&dev->lock);
	if (ret)
		for (unsigned int i = 0; i < dev->nr_queues; i++)
			worker__wake(dev->queues[i].kick_fd, dev->name, "kick");
	return ret;
}

int virtio_device__resume(struct virtio_device *dev)
{
	pthread_mutex_lock(&dev->lock);
	if (!dev->paused) {
		pthread_mutex_unlock(&dev->lock);
		return -EALREADY;
	}
	__atomic_store_n(&dev->paused, false, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&dev->lock);
	/*
	 * A kick that came while paused woke the loop, which found the
	 * device not live and dropped it: every queue looks again. Host
	 * side work (vsock's sockets, a tap) is looked at on the same wake.
	 */
	for (unsigned int i = 0; i < dev->nr_queues; i++)
		worker__wake(dev->queues[i].kick_fd, dev->name, "kick");
	return 0;
}

/* ---- save ---------------------------------------------------------- */

static json_t *queue_json(const struct virtio_queue *q)
{
	const struct virtqueue *vq = &q->vq;

	return json_pack("{s:I, s:I, s:I, s:I, s:I, s:b, s:b, s:b, s:I, s:I, "
			 "s:I, s:b}",
			 "maxSize", (json_int_t)q->max_size, "size",
			 (json_int_t)q->size, "desc", (json_int_t)q->desc_gpa,
			 "driver", (json_int_t)q->driver_gpa, "device",
			 (json_int_t)q->device_gpa, "ready", vq->ready,
			 "broken", vq->broken, "eventIdx", vq->event_idx,
			 "lastAvailIdx", (json_int_t)vq->last_avail_idx,
			 "usedIdx", (json_int_t)vq->used_idx, "signalledUsed",
			 (json_int_t)vq->signalled_used, "signalledUsedValid",
			 vq->signalled_used_valid);
}

/* The config space as the driver reads it, base64. */
static json_t *config_json(struct virtio_device *dev)
{
	uint8_t *buf;
	char *text;
	json_t *j;

	buf = calloc(1, dev->config_size ? dev->config_size : 1);
	text = malloc(base64__encoded_len(dev->config_size) + 1);
	if (!buf || !text) {
		free(buf);
		free(text);
		return NULL;
	}
	/* The op takes 1 to 8 bytes at a time (device.h). */
	for (uint32_t at = 0; dev->ops->config_read && at < dev->config_size;
	     at += 8)
		dev->ops->config_read(
			dev, at, buf + at,
			dev->config_size - at < 8 ? dev->config_size - at : 8);
	base64__encode(buf, dev->config_size, text);
	j = json_string(text);
	free(buf);
	free(text);
	return j;
}

static json_t *core_json(struct virtio_device *dev)
{
	json_t *o, *queues;

	o = json_pack("{s:s, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I}",
		      "name", dev->name, "deviceId", (json_int_t)dev->device_id,
		      "status", (json_int_t)virtio_device__status(dev),
		      "deviceFeatures", (json_int_t)dev->device_features,
		      "driverFeatures", (json_int_t)dev->driver_features,
		      "features", (json_int_t)dev->features,
		      "deviceFeaturesSel", (json_int_t)dev->device_features_sel,
		      "driverFeaturesSel", (json_int_t)dev->driver_features_sel,
		      "queueSel", (json_int_t)dev->queue_sel,
		      "configGeneration",
		      (json_int_t)__atomic_load_n(&dev->config_generation,
						  __ATOMIC_ACQUIRE));
	queues = json_array();
	if (!o || !queues)
		goto out_fail;
	json_object_set_new(o, "isr", json_integer(virtio_device__isr(dev)));
	if (json_object_set_new(o, "config", config_json(dev)))
		goto out_fail;
	for (unsigned int i = 0; i < dev->nr_queues; i++)
		if (json_array_append_new(queues, queue_json(&dev->queues[i])))
			goto out_fail;
	json_object_set_new(o, "queues", queues);
	return o;

out_fail:
	json_decref(queues);
	json_decref(o);
	return NULL;
}

int virtio_device__save(struct virtio_device *dev, json_t **out, char *err,
			size_t len)
{
	json_t *o = NULL, *own = NULL;
	int ret;

	if (len)
		err[0] = '\0';
	pthread_mutex_lock(&dev->lock);
	if (!dev->ops->save) {
		ret = -EOPNOTSUPP;
		goto out;
	}
	if (!dev->paused) {
		ret = -EINVAL;
		goto out;
	}
	ret = -ENOMEM;
	o = core_json(dev);
	own = json_object();
	if (!o || !own)
		goto out;
	ret = dev->ops->save(dev, own, err, len);
	if (!ret && json_object_set(o, "device", own))
		ret = -ENOMEM;
out:
	pthread_mutex_unlock(&dev->lock);
	json_decref(own);
	if (ret) {
		json_decref(o);
		return ret;
	}
	*out = o;
	return 0;
}

/* ---- load ---------------------------------------------------------- */

/* obj[key] as an integer in 0..max, or false with err naming it. */
static bool get_uint(const json_t *obj, const char *key, uint64_t max,
		     uint64_t *v, char *err, size_t len)
{
	json_t *j = json_object_get(obj, key);

	if (!json_is_integer(j) || json_integer_value(j) < 0 ||
	    (uint64_t)json_integer_value(j) > max) {
		snprintf(err, len, "%s: not an integer in 0..%" PRIu64, key,
			 max);
		return false;
	}
	*v = (uint64_t)json_integer_value(j);
	return true;
}

static bool get_bool(const json_t *obj, const char *key, bool *v, char *err,
		     size_t len)
{
	json_t *j = json_object_get(obj, key);

	if (!json_is_boolean(j)) {
		snprintf(err, len, "%s: not a boolean", key);
		return false;
	}
	*v = json_is_true(j);
	return true;
}

static int load_queue(struct virtio_device *dev, struct virtio_queue *q,
		      const json_t *j, char *err, size_t len)
{
	uint64_t max, size, desc, drv, devr, last, used, sig;
	bool ready, broken, event_idx, sig_valid;

	if (!json_is_object(j) ||
	    !get_uint(j, "maxSize", UINT16_MAX, &max, err, len) ||
	    !get_uint(j, "size", VIRTQUEUE_MAX_SIZE, &size, err, len) ||
	    !get_uint(j, "desc", UINT64_MAX >> 1, &desc, err, len) ||
	    !get_uint(j, "driver", UINT64_MAX >> 1, &drv, err, len) ||
	    !get_uint(j, "device", UINT64_MAX >> 1, &devr, err, len) ||
	    !get_bool(j, "ready", &ready, err, len) ||
	    !get_bool(j, "broken", &broken, err, len) ||
	    !get_bool(j, "eventIdx", &event_idx, err, len) ||
	    !get_uint(j, "lastAvailIdx", UINT16_MAX, &last, err, len) ||
	    !get_uint(j, "usedIdx", UINT16_MAX, &used, err, len) ||
	    !get_uint(j, "signalledUsed", UINT16_MAX, &sig, err, len) ||
	    !get_bool(j, "signalledUsedValid", &sig_valid, err, len))
		return -EINVAL;
	if (max != q->max_size || size > max) {
		snprintf(err, len,
			 "%s: size %" PRIu64 " (max %" PRIu64
			 "), the device's max is %u",
			 q->name, size, max, q->max_size);
		return -EINVAL;
	}
	q->size = (uint32_t)size;
	q->desc_gpa = desc;
	q->driver_gpa = drv;
	q->device_gpa = devr;
	if (ready && !broken) {
		if (event_idx != virtio_device__has_feature(
					 dev, VIRTIO_RING_F_EVENT_IDX) ||
		    virtqueue__configure(&q->vq, dev->mem, (uint16_t)size, desc,
					 drv, devr, event_idx)) {
			snprintf(err, len,
				 "%s: the ring does not fit guest "
				 "memory or the features",
				 q->name);
			return -EINVAL;
		}
		q->vq.last_avail_idx = (uint16_t)last;
		q->vq.used_idx = (uint16_t)used;
		q->vq.signalled_used = (uint16_t)sig;
		q->vq.signalled_used_valid = sig_valid;
	}
	/* A broken queue stays broken: NEEDS_RESET is in the status. */
	q->vq.broken = broken;
	return 0;
}

int virtio_device__load(struct virtio_device *dev, const json_t *state,
			char *err, size_t len)
{
	uint64_t id, status, dfeat, drvfeat, feat, dsel, drsel, qsel, gen, isr;
	const json_t *queues;
	int ret = -EINVAL;

	if (!json_is_object(state) ||
	    !get_uint(state, "deviceId", UINT32_MAX, &id, err, len) ||
	    !get_uint(state, "status", UINT8_MAX, &status, err, len) ||
	    !get_uint(state, "deviceFeatures", INT64_MAX, &dfeat, err, len) ||
	    !get_uint(state, "driverFeatures", INT64_MAX, &drvfeat, err, len) ||
	    !get_uint(state, "features", INT64_MAX, &feat, err, len) ||
	    !get_uint(state, "deviceFeaturesSel", UINT32_MAX, &dsel, err,
		      len) ||
	    !get_uint(state, "driverFeaturesSel", UINT32_MAX, &drsel, err,
		      len) ||
	    !get_uint(state, "queueSel", UINT32_MAX, &qsel, err, len) ||
	    !get_uint(state, "configGeneration", UINT32_MAX, &gen, err, len) ||
	    !get_uint(state, "isr", VIRTIO_ISR_QUEUE | VIRTIO_ISR_CONFIG, &isr,
		      err, len))
		return -EINVAL;
	if (id != dev->device_id || dfeat != dev->device_features) {
		snprintf(err, len,
			 "%s: device id %" PRIu64 " features %#" PRIx64
			 ", this one is %u with %#" PRIx64,
			 dev->name, id, dfeat, dev->device_id,
			 dev->device_features);
		return -EINVAL;
	}
	if (feat & ~dev->device_features) {
		snprintf(err, len, "features: %#" PRIx64 " were not offered",
			 feat & ~dev->device_features);
		return -EINVAL;
	}
	queues = json_object_get(state, "queues");
	if (!json_is_array(queues) ||
	    json_array_size(queues) != dev->nr_queues) {
		snprintf(err, len, "queues: not %u of them", dev->nr_queues);
		return -EINVAL;
	}
	pthread_mutex_lock(&dev->lock);
	/* The ring format depends on the features: they go first. */
	dev->driver_features = drvfeat;
	dev->features = feat;
	dev->device_features_sel = (uint32_t)dsel;
	dev->driver_features_sel = (uint32_t)drsel;
	dev->queue_sel = (uint32_t)qsel;
	__atomic_store_n(&dev->config_generation, (uint32_t)gen,
			 __ATOMIC_RELEASE);
	for (unsigned int i = 0; i < dev->nr_queues; i++) {
		ret = load_queue(dev, &dev->queues[i],
				 json_array_get(queues, i), err, len);
		if (ret)
			goto out;
	}
	__atomic_store_n(&dev->status, (uint8_t)status, __ATOMIC_RELEASE);
	pthread_mutex_lock(&dev->irq_lock);
	dev->isr = (uint32_t)isr; /* the line's level is in the irqchip's */
	pthread_mutex_unlock(&dev->irq_lock);
out:
	pthread_mutex_unlock(&dev->lock);
	return ret;
}

int virtio_device__restore(struct virtio_device *dev, const json_t *state,
			   char *err, size_t len)
{
	const json_t *own = json_object_get(state, "device");
	int ret;

	if (!dev->ops->restore) {
		snprintf(err, len, "%s: this device cannot be restored yet",
			 dev->name);
		return -EOPNOTSUPP;
	}
	ret = virtio_device__load(dev, state, err, len);
	if (ret)
		return ret;
	if (!json_is_object(own)) {
		snprintf(err, len, "%s: no \"device\" object", dev->name);
		return -EINVAL;
	}
	pthread_mutex_lock(&dev->lock);
	ret = dev->ops->restore(dev, own, err, len);
	pthread_mutex_unlock(&dev->lock);
	if (ret)
		return ret;
	for (unsigned int i = 0; i < dev->nr_queues; i++)
		worker__wake(dev->queues[i].kick_fd, dev->name, "kick");
	return 0;
}

void virtio_device__restore_irq(struct virtio_device *dev)
{
	pthread_mutex_lock(&dev->irq_lock);
	if (dev->isr) {
		irq_line__set(&dev->irq, 1);
		dev->irq_raises++;
	}
	pthread_mutex_unlock(&dev->irq_lock);
}
