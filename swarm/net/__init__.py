"""Peers on the wire: the message codec and decoder, the transport contract, TCP, QUIC and memory."""
