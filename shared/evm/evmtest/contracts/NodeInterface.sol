// SPDX-License-Identifier: UNLICENSED
pragma solidity 0.8.37;

/// @title NodeInterface: an Arbitrum-style NodeInterface for tests, installed
/// in genesis at 0x00000000000000000000000000000000000000C8, with
/// Arbitrum's signature of gasEstimateL1Component. The L1 component of a
/// transaction, in L2 gas, is (its calldata's length + OVERHEAD) × the L2
/// gas charged per byte posted to L1, so that a test can tell it from the
/// calldata's length alone.
contract NodeInterface {
    /// The bytes of a transaction posted to L1 besides its calldata.
    uint256 public constant OVERHEAD = 140;

    /// The L2 gas charged for each byte posted to L1 (slot 0, set in genesis).
    uint256 public gasPerByte;

    /// The L1 base fee in wei reported with an estimate (slot 1).
    uint256 public l1BaseFee;

    /// Moves the L2 gas charged per byte posted to L1.
    function setGasPerByte(uint256 gas) external {
        gasPerByte = gas;
    }

    /// Moves the L1 base fee reported with an estimate.
    function setL1BaseFee(uint256 fee) external {
        l1BaseFee = fee;
    }

    /// The L1 component of a transaction to `to` (a creation when
    /// `contractCreation`) with calldata `data`, in L2 gas, with the L2 base
    /// fee and the L1 base fee it was priced at.
    function gasEstimateL1Component(address, bool, bytes calldata data)
        external
        payable
        returns (uint64 gasEstimateForL1, uint256 baseFee, uint256 l1BaseFeeEstimate)
    {
        gasEstimateForL1 = uint64((data.length + OVERHEAD) * gasPerByte);
        baseFee = block.basefee;
        l1BaseFeeEstimate = l1BaseFee;
    }
}
