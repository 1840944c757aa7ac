"""kombu's Redis transport, with acks that cannot wedge the worker's consumer.

kombu's Redis QoS frees a prefetch slot only after the ack's Redis pipeline
succeeded. When Redis times out during an ack (a frozen or black-holed server),
the slot is never freed: with late acks and a prefetch of one message per pool
slot, a few failed acks leave the consumer believing its window is full, and it
never fetches again although Redis is back (as with a SIGSTOPped Redis). Here
the slot is freed whatever happens to the pipeline. A message whose ack was lost
stays in kombu's unacked index and is redelivered after the visibility timeout;
the work queue turns that duplicate into a no-op (the key is no longer queued).
"""

from __future__ import annotations

from typing import Any

from kombu.transport import redis as kombu_redis
from kombu.transport import virtual

TRANSPORT = "reconciler.queue.broker:Transport"


class QoS(kombu_redis.QoS):
    def ack(self, delivery_tag: Any) -> None:
        try:
            kombu_redis.QoS._remove_from_indices(self, delivery_tag).execute()
        finally:
            virtual.QoS.ack(self, delivery_tag)

    def reject(self, delivery_tag: Any, requeue: bool = False) -> None:
        try:
            if requeue:
                kombu_redis.QoS.restore_by_tag(self, delivery_tag, leftmost=True)
            else:
                kombu_redis.QoS._remove_from_indices(self, delivery_tag).execute()
        finally:
            virtual.QoS.ack(self, delivery_tag)


class Channel(kombu_redis.Channel):
    QoS = QoS


class Transport(kombu_redis.Transport):
    Channel = Channel
