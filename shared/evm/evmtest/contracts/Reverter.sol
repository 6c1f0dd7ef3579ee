// SPDX-License-Identifier: UNLICENSED
pragma solidity 0.8.37;

/// @title Reverter: each function reverts in one of the ways a revert's data
/// can be encoded.
contract Reverter {
    error InsufficientBalance(address who, uint256 need, uint256 have);

    /// Reverts with Error(string).
    function failWithReason() external pure {
        revert("Reverter: no reason to go on");
    }

    /// Panics with 0x12 (division by zero) when divisor is 0.
    function failWithPanic(uint256 divisor) external pure returns (uint256) {
        return 1 / divisor;
    }

    /// Reverts with the custom error InsufficientBalance(caller, need, balance).
    function failWithCustom(uint256 need) external view {
        revert InsufficientBalance(msg.sender, need, address(this).balance);
    }

    /// Reverts with no data.
    function failWithoutData() external pure {
        revert();
    }
}
