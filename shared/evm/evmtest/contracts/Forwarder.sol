// SPDX-License-Identifier: UNLICENSED
pragma solidity 0.8.37;

/// @title Forwarder: moves the native value it is sent on to others with
/// internal calls, the transfers only a call tracer sees.
contract Forwarder {
    event Forwarded(address indexed to, uint256 value);

    /// Sends all of msg.value on to `to`.
    function forward(address payable to) external payable {
        _send(to, msg.value);
    }

    /// Sends half of msg.value to `a` and the rest to `b`.
    function split(address payable a, address payable b) external payable {
        uint256 half = msg.value / 2;
        _send(a, half);
        _send(b, msg.value - half);
    }

    function _send(address payable to, uint256 value) internal {
        (bool ok,) = to.call{value: value}("");
        require(ok, "Forwarder: transfer failed");
        emit Forwarded(to, value);
    }
}
